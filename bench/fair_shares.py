"""Fair dispatch's two targets that `bench.fair_dispatch` does not measure, in one run on
a database of its own, one worker process with dispatch on (`JOBRAIL_DISPATCH__ENABLED`),
every job a `bench.stamp` that appends a line as it starts (`bench.fair_jobs`):

0. **Capacity**: a backlog of `capacity_jobs` held jobs of one tenant, then the worker
   starts: jobs/s between the 10th and the 90th percentile of the starts (the burst of
   the first release and the tail left out); the shares' backlogs are sized by it. Then
   jobs sent at that rate (`bench.fair_starvation.capacity_under_flood`): the jobs/s the
   worker starts while jobs arrive, enqueued on the same cores, is the capacity the
   floods' rates are fractions of.
1. **Weighted shares**: three tenants with weights 3, 2 and 1 (`SetTenantWeight`, as
   `jobrail tenants set-weight` sets them), each with a backlog of `margin` times its
   share of `share_seconds` of work at that capacity, all enqueued before the worker
   starts. Per `window_s` window from the first start: each tenant's share of the
   starts against 3:2:1, and the worst relative deviation (target: within 10 %).
2. **Starvation** (`bench.fair_starvation`): a flood of `high` jobs at 90 % of capacity
   and a trickle of `low` ones at 5 %, for 30 s, in three shapes: the lows in the
   flooding tenant's line (the priorities' default offsets, and a high job only 10 s
   ahead of a low one) and in a tenant of their own. The lows' starts per 5 s window
   (the target: none without any once the first has started, after the aging), the
   longest time without a low start, and the waits.

python -m bench.fair_shares [--quick]

Writes bench/results/shares-<date>.json; `make bench` runs it too (bench.run).
"""

import argparse
import asyncio
import datetime
import json
import math
import os
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

from bench.common import ROOT, Proc, machine, unique, wait_until, write_json
from bench.fair_dispatch import FairStack, enqueue_all, reset, runtime_of
from bench.fair_jobs import stamped
from bench.fair_starvation import (
    SHAPES,
    Flood,
    capacity_under_flood,
    new_path,
    stamp,
    start_worker,
    starvation,
    step,
)
from bench.jobrail_e2e import cleanup, create_database
from jobrail.kernel.clock import SystemClock
from jobrail.kernel.ids import TenantId
from jobrail.store.admin import drop_database
from jobrail.store.engine import create_engine
from jobrail.store.tenants import SqlaTenantDirectory
from jobrail.tenants.use_cases import CreateTenant, SetTenantWeight

RESULTS = ROOT / "bench" / "results"
WEIGHTS = {"w3": 3.0, "w2": 2.0, "w1": 1.0}


@dataclass(frozen=True)
class Sizes:
    """What one run measures (the defaults: `python -m bench.fair_shares`)."""

    capacity_jobs: int = 3000
    share_seconds: float = 30.0
    window_s: float = 10.0
    margin: float = 1.25
    flood: Flood = field(default_factory=Flood)

    @classmethod
    def quick(cls) -> "Sizes":
        return cls(1000, share_seconds=20.0, flood=Flood(seconds=10.0, calibrate_seconds=6.0))


# 0. Capacity


async def capacity(url: str, sizes: Sizes) -> dict[str, Any]:
    step(f"capacity: {sizes.capacity_jobs:,} held jobs drained by one worker")
    stack = FairStack(database_url=url, prefix=unique("bench."), dispatch=True)
    await reset(stack)
    path, count = new_path(), sizes.capacity_jobs
    process: Proc | None = None
    try:
        async with runtime_of(stack.settings()) as runtime:
            await enqueue_all(runtime, [stamp("cap", path)] * count)
        process = await start_worker(stack, "capacity")

        async def all_started() -> bool:
            return len(stamped(path)) >= count

        await wait_until(all_started, count / 50 + 60, "the backlog to start", interval=0.1)
    finally:
        if process is not None:
            process.stop()
        await cleanup(stack)
    times = sorted(t for _, _, t in stamped(path))
    low, high = int(count * 0.1), int(count * 0.9)
    return {"jobs": count, "jobs_per_s": round((high - low) / (times[high] - times[low]), 1)}


# 1. Weighted shares


async def weighted(url: str, sizes: Sizes, rate: float) -> dict[str, Any]:
    total = sum(WEIGHTS.values())
    backlog = {
        t: math.ceil(sizes.margin * sizes.share_seconds * rate * w / total)
        for t, w in WEIGHTS.items()
    }
    step(f"weighted shares 3:2:1, backlogs {backlog}")
    stack = FairStack(database_url=url, prefix=unique("bench."), dispatch=True)
    await reset(stack)
    await _weigh(stack)
    path = new_path()
    process: Proc | None = None
    try:
        async with runtime_of(stack.settings()) as runtime:
            for tenant, count in backlog.items():
                await enqueue_all(runtime, [stamp(tenant, path)] * count)
        process = await start_worker(stack, "weighted")

        async def first_start() -> bool:
            return bool(stamped(path))

        await wait_until(first_start, 60, "the first start", interval=0.05)
        await asyncio.sleep(sizes.share_seconds + 0.5)
    finally:
        if process is not None:
            process.stop()
        await cleanup(stack)
    return {"backlog": backlog, **shares_by_window(stamped(path), sizes, backlog)}


async def _weigh(stack: FairStack) -> None:
    """The three tenants and their weights, as `jobrail tenants create` and `set-weight`."""
    engine = create_engine(stack.settings().database)
    directory = SqlaTenantDirectory(engine)
    try:
        for tenant, weight in WEIGHTS.items():
            await CreateTenant(directory, SystemClock())(tenant)
            await SetTenantWeight(directory)(TenantId(tenant), weight)
    finally:
        await engine.dispose()


def shares_by_window(
    starts: list[tuple[str, str, float]], sizes: Sizes, backlog: dict[str, int]
) -> dict[str, Any]:
    """Each window's starts per tenant, their shares against the weights' and the
    relative deviation; a window after some tenant's last start is marked, since that
    tenant was no longer backlogged."""
    first = starts[0][2]
    last_start = {tenant: t for tenant, _, t in starts}  # the last line of each tenant
    ran_dry = min(
        (last_start[t] for t in WEIGHTS if sum(1 for s in starts if s[0] == t) >= backlog[t]),
        default=math.inf,
    )
    total_weight = sum(WEIGHTS.values())
    windows: list[dict[str, Any]] = []
    for k in range(int(sizes.share_seconds // sizes.window_s)):
        begin = first + k * sizes.window_s
        counts = Counter(t for t, _, at in starts if begin <= at < begin + sizes.window_s)
        n = max(sum(counts.values()), 1)
        deviation = {
            t: round(100 * (counts[t] / n) / (w / total_weight) - 100, 1)
            for t, w in WEIGHTS.items()
        }
        windows.append(
            {
                "from_s": k * sizes.window_s,
                "started": {t: counts[t] for t in WEIGHTS},
                "shares_pct": {t: round(100 * counts[t] / n, 1) for t in WEIGHTS},
                "deviation_pct": deviation,
                "all_backlogged": begin + sizes.window_s <= ran_dry,
                "jobs_per_s": round(n / sizes.window_s, 1),
            }
        )
    counted = [w for w in windows if w["all_backlogged"]]
    worst = max((abs(d) for w in counted for d in w["deviation_pct"].values()), default=None)
    return {"windows": windows, "worst_deviation_pct": worst}


# The run


async def run(sizes: Sizes | None = None) -> dict[str, Any]:
    """Capacity, then the shares and the three starvation shapes at fractions of it, on a
    database of their own; with the machine's load average before and after."""
    sizes = sizes or Sizes()
    load_before = os.getloadavg()
    url = await create_database()
    try:
        cap = await capacity(url, sizes)
        weighted_shares = await weighted(url, sizes, cap["jobs_per_s"])
        cap["under_flood"] = await capacity_under_flood(url, sizes.flood, cap["jobs_per_s"])
        rate = cap["under_flood"]["jobs_per_s"]
        results = {
            "capacity": cap,
            "weighted": weighted_shares,
            "starvation": {
                key: await starvation(
                    url, sizes.flood, rate, across=key == "across_tenants", offsets=offsets
                )
                for key, _, offsets in SHAPES
            },
        }
    finally:
        await drop_database(url)
    load_after = os.getloadavg()
    return {**results, "load_average": {"before": load_before, "after": load_after}}


def ratios(r: dict[str, Any]) -> dict[str, Any]:
    """The run's headline figures, as `bench.run` keeps them."""
    return {
        "weighted_shares_worst_deviation_pct": r["weighted"]["worst_deviation_pct"],
        **{
            f"starvation_{key}_low_{figure}": r["starvation"][key]["low"][figure]
            for key, _, _ in SHAPES
            for figure in ("zero_windows_after_first", "longest_gap_s")
        },
    }


def rows(r: dict[str, Any]) -> list[tuple[str, str]]:
    """The run's lines of the results table (bench/README.md)."""
    w = r["weighted"]
    per_window = "; ".join(
        " / ".join(f"{window['shares_pct'][t]:g}" for t in WEIGHTS)
        + ("" if window["all_backlogged"] else " (a tenant ran dry)")
        for window in w["windows"]
    )
    before, after = (r["load_average"][k][0] for k in ("before", "after"))
    lines = [
        ("machine load average (1 min), before / after", f"{before:.1f} / {after:.1f}"),
        (
            "capacity, 1 worker: a held backlog / while jobs arrive at that rate",
            f"{r['capacity']['jobs_per_s']:g} / {r['capacity']['under_flood']['jobs_per_s']:g} "
            "jobs/s",
        ),
        ("weighted 3:2:1, all backlogged: shares % per 10 s window", per_window),
        (
            "weighted 3:2:1: worst deviation from 3:2:1",
            f"{w['worst_deviation_pct']} % (target <= 10 %)",
        ),
    ]
    for key, label, _ in SHAPES:
        s = r["starvation"][key]
        low, high = s["low"], s["high"]
        flood = f"starvation, {label} (high {s['high_per_s']:g}/s, low {s['low_per_s']:g}/s)"
        never = f", {low['never_started']} never started" if low["never_started"] else ""
        lines += [
            (
                f"{flood}: low starts per 5 s",
                f"{' '.join(map(str, low['per_window']))} (windows with none: "
                f"{_none(low['zero_windows_after_first'])} after the first{_aged(low)})",
            ),
            (
                f"{flood}: wait p50 / p99, low; high",
                f"{low['wait_p50_ms']} / {low['wait_p99_ms']} ms{never}; "
                f"{high['wait_p50_ms']} / {high['wait_p99_ms']} ms "
                f"(highs started {high['started_per_s_during_flood']:g}/s in the flood)",
            ),
        ]
    return lines


def _none(value: Any) -> str:
    return "-" if value is None else str(value)


def _aged(low: dict[str, Any]) -> str:
    aging = "" if low["aging_s"] is None else f", aging {low['aging_s']:g} s"
    return f"; longest without one {_none(low['longest_gap_s'])} s{aging}"


def main() -> None:
    from bench.run import render

    parser = argparse.ArgumentParser(
        prog="python -m bench.fair_shares",
        description="Weighted shares and starvation under fair dispatch (about 3 minutes).",
    )
    parser.add_argument("--quick", action="store_true", help="smaller backlogs, shorter loads")
    sizes = Sizes.quick() if parser.parse_args().quick else Sizes()
    began = time.time()
    results: dict[str, Any] = {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "sizes": asdict(sizes),
        **asyncio.run(run(sizes)),
    }
    results["ratios"] = ratios(results)
    results["seconds"] = round(time.time() - began)
    write_json(RESULTS / f"shares-{results['date'][:19].replace(':', '')}.json", results)
    print("\n".join(render(rows(results))), flush=True)
    print(json.dumps(results["ratios"]), f"({results['seconds']}s)", file=sys.stderr)


if __name__ == "__main__":
    main()
