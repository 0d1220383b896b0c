"""Fair dispatch under a flood (`bench.fair_shares` runs it): `high` jobs sent at a steady
rate near the worker's capacity and a trickle of `low` jobs, both enqueued in this
process (an open loop: each on time whatever the ones before wait for), to one worker
process with dispatch on; every job a `bench.stamp`, which appends a line as it starts
(`bench.fair_jobs`).

- `capacity_under_flood`: the jobs/s the worker starts while jobs arrive at a given rate
  (enqueued on the same cores as the floods are), over the second half of the load;
- `starvation`: the lows' starts per window of the flood, the windows with none once the
  first low has started, the longest time without a low start (set against the aging,
  the high offset less the low's: no high overtakes a low enqueued longer ago than
  that, so once the highs back up the lows enqueued since wait that long), the lows' and
  the highs' waits
  (enqueue committed to started) p50 and p99, and the highs' start rate (did the flood
  fit the capacity?). In three shapes (SHAPES): the lows in the flooding tenant's line
  (priorities order a tenant's own jobs: the case the starvation target is about) with
  the priorities' default offsets, and with a high job only 10 s ahead of a low one so
  that the aging shows within a flood; and the lows in a tenant of their own (the
  weights decide, equal here).
"""

import asyncio
import itertools
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.common import Proc, unique, wait_until
from bench.fair_dispatch import (
    STALL_S,
    FairStack,
    Send,
    has_consumer,
    paced,
    reset,
    runtime_of,
    work_queue,
    worker,
)
from bench.fair_jobs import stamped
from bench.jobrail_e2e import cleanup
from jobrail.jobs.enqueue import EnqueueJob, EnqueueJobCommand
from jobrail.jobs.priority import Priority
from jobrail.kernel.ids import TenantId
from jobrail.runtime.bootstrap import Runtime
from jobrail.settings import DispatchSettings

# The lows in the flooding tenant's line with the priorities' default offsets (a high job
# 120 s ahead of a low one) and with offsets short enough for the aging to show within a
# flood (10 s); then in a tenant of their own: (key, label, offsets or None).
SHORT_OFFSETS = {"low": 0.0, "normal": 2.5, "high": 10.0, "urgent": 50.0}
SHAPES: tuple[tuple[str, str, dict[str, float] | None], ...] = (
    ("same_tenant", "same tenant", None),
    ("same_tenant_high_10s_ahead", "same tenant, high 10 s ahead", SHORT_OFFSETS),
    ("across_tenants", "across tenants", None),
)


@dataclass(frozen=True)
class Flood:
    """How long and how hard: `high` and `low` are fractions of the capacity."""

    seconds: float = 30.0
    high: float = 0.9
    low: float = 0.05
    window_s: float = 5.0
    calibrate_seconds: float = 10.0


def step(name: str) -> None:
    print(f"... fair shares: {name}", file=sys.stderr, flush=True)


def stamp(tenant: str, path: str, priority: Priority | None = None) -> EnqueueJobCommand:
    return EnqueueJobCommand(
        tenant_id=TenantId(tenant), type="bench.stamp", payload={"path": path}, priority=priority
    )


def new_path() -> str:
    """A new file for a measure's starts."""
    return str(Path(tempfile.mkdtemp(prefix="jobrail-shares-")) / "starts")


async def start_worker(stack: FairStack, name: str) -> Proc:
    process = worker(stack, f"shares-{name}")
    await wait_until(lambda: has_consumer(work_queue(stack)), 60, "the worker")
    return process


def percentile(values: list[float], q: float) -> float | None:
    ordered = sorted(values)
    return round(ordered[min(int(len(ordered) * q), len(ordered) - 1)], 1) if ordered else None


@dataclass
class Load:
    """Jobs of one tenant and priority sent at a steady rate during a flood: when each
    was sent, and when its enqueue had committed (from then on its wait is counted)."""

    tenant: str
    priority: Priority
    rate: float
    sent: dict[str, float] = field(default_factory=dict)
    committed: dict[str, float] = field(default_factory=dict)
    errors: int = 0
    answered_p50_ms: float | None = None

    def sender(self, runtime: Runtime, path: str) -> Send:
        command = stamp(self.tenant, path, self.priority)

        async def send() -> str:
            async with runtime.container() as request:
                result = await (await request.get(EnqueueJob))(command)
            self.committed[str(result.job.id)] = time.time()
            return str(result.job.id)

        return send


async def flood(
    url: str, loads: list[Load], seconds: float, offsets: dict[str, float] | None = None
) -> tuple[dict[str, float], float]:
    """Send `loads` side by side for `seconds` to one worker (started first), then wait
    until all their jobs have started (or none has for STALL_S): each job's start time,
    and when the loads began (``time.time()``). `offsets`: the priorities' own (the
    platform's defaults if None)."""
    stack = FairStack(database_url=url, prefix=unique("bench."), dispatch=True, offsets=offsets)
    await reset(stack)
    path = new_path()
    process = await start_worker(stack, "flood")
    try:
        async with runtime_of(stack.settings()) as runtime:
            began = time.time()
            sent = await asyncio.gather(
                *(paced(load.sender(runtime, path), load.rate, seconds, 0) for load in loads)
            )
        for load, result in zip(loads, sent, strict=True):
            load.sent, load.errors = result["sent"], len(result["errors"])
            load.answered_p50_ms = result["answered_p50_ms"]
        await _wait_for(path, {job for load in loads for job in load.committed})
    finally:
        process.stop()
        await cleanup(stack)
    return {job_id: at for _, job_id, at in stamped(path)}, began


async def capacity_under_flood(url: str, sizes: Flood, drained: float) -> dict[str, Any]:
    """Jobs/s the worker starts while jobs arrive at the drain rate (enqueued here, on
    the same cores), over the second half of `calibrate_seconds`."""
    step(f"capacity under a flood at {drained:.0f}/s")
    load = Load("cal", Priority.NORMAL, drained)
    starts, began = await flood(url, [load], sizes.calibrate_seconds)
    half = sizes.calibrate_seconds / 2
    counted = sum(1 for at in starts.values() if began + half <= at < began + 2 * half)
    return {"sent_per_s": round(drained, 1), "jobs_per_s": round(counted / half, 1)}


async def starvation(
    url: str, sizes: Flood, rate: float, *, across: bool, offsets: dict[str, float] | None
) -> dict[str, Any]:
    """A flood of highs and a trickle of lows, the lows in the flooding tenant's own line
    or, `across`, in a tenant of their own."""
    high = Load("flood", Priority.HIGH, sizes.high * rate)
    low = Load("trickle" if across else "flood", Priority.LOW, sizes.low * rate)
    step(f"starvation: high {high.rate:.0f}/s, low {low.rate:.0f}/s, {across=}, {offsets=}")
    starts, began = await flood(url, [high, low], sizes.seconds, offsets)
    ended = began + sizes.seconds
    return {
        "offsets_s": offsets,
        "high_per_s": round(high.rate, 1),
        "low_per_s": round(low.rate, 1),
        "high": {
            **_waits(high, starts, began, ended),
            "per_window": _per_window(high, starts, began, sizes),
        },
        "low": {
            **_waits(low, starts, began, ended),
            **_low_windows(low, starts, began, sizes, None if across else _aging_s(offsets)),
        },
    }


async def _wait_for(path: str, job_ids: set[str]) -> None:
    """Until every job of `job_ids` has started, or no job at all has for STALL_S."""
    seen, moved = -1, time.monotonic()
    while True:
        lines = stamped(path)
        if job_ids <= {job_id for _, job_id, _ in lines}:
            return
        if len(lines) != seen:
            seen, moved = len(lines), time.monotonic()
        elif time.monotonic() - moved > STALL_S:
            return
        await asyncio.sleep(0.2)


def _waits(load: Load, starts: dict[str, float], began: float, ended: float) -> dict[str, Any]:
    """How many of a load's jobs were sent and started (during the flood, and at all),
    their wait from committed to started, p50 and p99, and the enqueues' own p50."""
    waits = [1000 * (starts[j] - at) for j, at in load.committed.items() if j in starts]
    during = sum(1 for j in load.committed if j in starts and starts[j] < ended)
    return {
        "sent": len(load.sent),
        "errors": load.errors,
        "enqueue_p50_ms": load.answered_p50_ms,
        "started_during_flood": during,
        "started_per_s_during_flood": round(during / (ended - began), 1),
        "never_started": len(load.committed) - len(waits),
        "wait_p50_ms": round(statistics.median(waits), 1) if waits else None,
        "wait_p99_ms": percentile(waits, 0.99),
    }


def _aging_s(offsets: dict[str, float] | None) -> float:
    """How long a high job can overtake a low one for: their offsets' difference."""
    used = offsets or DispatchSettings().priority_offsets_s
    return used["high"] - used["low"]


def _per_window(load: Load, starts: dict[str, float], began: float, sizes: Flood) -> list[int]:
    """A load's starts in each window of the flood."""
    windows = [0] * int(sizes.seconds // sizes.window_s)
    for job_id in load.committed:
        k = int((starts.get(job_id, -1.0) - began) // sizes.window_s)
        if 0 <= k < len(windows):
            windows[k] += 1
    return windows


def _low_windows(
    load: Load, starts: dict[str, float], began: float, sizes: Flood, aging_s: float | None
) -> dict[str, Any]:
    """The lows' starts per window of the flood, the windows with none after the first
    start, and the longest the lows went without a start during the flood: once the
    highs back up, the lows enqueued after that wait for up to the aging (`aging_s`)."""
    times = sorted(starts[j] for j in load.committed if j in starts)
    ended = began + sizes.seconds
    windows = _per_window(load, starts, began, sizes)
    first = next((k for k, n in enumerate(windows) if n), None)
    during = [at for at in times if at < ended] + ([ended] if times and times[-1] >= ended else [])
    gaps = [b - a for a, b in itertools.pairwise(during)]
    return {
        "first_start_s": round(times[0] - began, 2) if times else None,
        "per_window": windows,
        "zero_windows_after_first": None if first is None else windows[first:].count(0),
        "longest_gap_s": round(max(gaps), 2) if gaps else None,
        "aging_s": aging_s,
    }
