"""`make bench`: every measurement in one run, against the same services, then a table
(fair dispatch against plain last, `bench.fair_dispatch`, then its weighted shares and
starvation, `bench.fair_shares`).

Writes bench/results/latest.json (and a dated copy) and the table in bench/README.md.
`--quick` is a smaller run; `--api-only` measures only the API and its peers (its results
go to a dated `api-*.json`, and the README is left alone); `--costs-only` only what a
batch and progress reports cost (a dated `costs-*.json`, the README left alone too).
"""

import argparse
import asyncio
import datetime
import json
import re
import statistics
import sys
import time
from typing import Any

from bench import (
    api_load,
    batch_cost,
    celery_pipeline,
    counts,
    fair_dispatch,
    fair_shares,
    jobrail_e2e,
    progress_cost,
    raw_aio_pika,
    raw_taskiq,
)
from bench.common import ROOT, machine, write_json

RESULTS = ROOT / "bench" / "results"
README = ROOT / "bench" / "README.md"


def step(name: str) -> None:
    print(f"... {name}", file=sys.stderr, flush=True)


async def measure(quick: bool) -> dict[str, Any]:
    scale = 0.3 if quick else 1.0
    step("raw aio-pika")
    aio_pika_rate = await raw_aio_pika.run(int(20_000 * scale))
    worker_rounds = []
    for n in range(2 if quick else 3):
        # Alternating, so that a machine that speeds up or slows down meanwhile moves
        # both (as in bench.api_load); each figure is the median over the rounds.
        step(f"raw taskiq, then jobrail with 1 worker process (round {n + 1})")
        taskiq = await raw_taskiq.run(int(10_000 * scale))
        alone = await jobrail_e2e.run(int(6_000 * scale), processes=(1,))
        worker_rounds.append(
            {
                "raw_taskiq_tasks_per_s": round(taskiq),
                "jobrail_jobs_per_s": alone["jobs_per_s"]["1"],
                "jobrail_enqueue_jobs_per_s": round(alone["enqueue_jobs_per_s"]),
                "pss_mb_loaded": alone["pss_mb_loaded"]["1"],
                "jobrail_cpu_ms_per_job": alone["cpu_ms_per_job"]["1"],
            }
        )
    step("the seeds' Celery pipeline")
    celery = await celery_pipeline.run(int(3_000 * scale))
    step("jobrail end to end, 2 and 4 worker processes")
    jobrail = await jobrail_e2e.run(int(6_000 * scale), processes=(2, 4))
    taskiq_rate = round(median_of(worker_rounds, "raw_taskiq_tasks_per_s"))
    jobrail["jobs_per_s"]["1"] = round(median_of(worker_rounds, "jobrail_jobs_per_s"))
    jobrail["pss_mb_loaded"]["1"] = round(median_of(worker_rounds, "pss_mb_loaded"), 1)
    jobrail["cpu_ms_per_job"]["1"] = round(median_of(worker_rounds, "jobrail_cpu_ms_per_job"), 3)
    jobrail["enqueue_jobs_per_s"] = median_of(worker_rounds, "jobrail_enqueue_jobs_per_s")
    vs_taskiq = statistics.median(
        r["jobrail_jobs_per_s"] / r["raw_taskiq_tasks_per_s"] for r in worker_rounds
    )
    step("per-job counts and memory")
    counted = await counts.run(300)
    step("API")
    api = await api_load.run(concurrency=32, seconds=3 if quick else 4, rounds=2 if quick else 3)
    costs = await measure_costs(quick)
    step("fair dispatch against plain (bench.fair_dispatch)")
    fair = await fair_dispatch.run(fair_dispatch.Sizes.quick() if quick else None)
    step("weighted shares and starvation under fair dispatch (bench.fair_shares)")
    shares = await fair_shares.run(fair_shares.Sizes.quick() if quick else None)
    celery_best = max(celery.values())
    one = jobrail["jobs_per_s"]["1"]
    return {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "raw_aio_pika_msgs_per_s": round(aio_pika_rate),
        "raw_taskiq_tasks_per_s": round(taskiq_rate),
        "celery_pipeline_jobs_per_s": celery_best,
        "celery_pipeline_by_pool": celery,
        "jobrail_jobs_per_s": jobrail["jobs_per_s"],
        "jobrail_cpu_ms_per_job": jobrail["cpu_ms_per_job"],
        "jobrail_enqueue_jobs_per_s": round(jobrail["enqueue_jobs_per_s"]),
        "ratios": {
            "jobrail_vs_taskiq": round(vs_taskiq, 2),
            "jobrail_vs_celery": round(one / celery_best, 2),
            **api_ratios(api),
            **costs["ratios"],
            **fair_dispatch.ratios(fair),
            **fair_shares.ratios(shares),
        },
        "per_job": {
            "redis_round_trips": counted["redis_round_trips"],
            "worker_sql_statements": counted["worker_sql_statements"],
            "worker_sql_round_trips": counted["worker_sql_round_trips"],
            "enqueue_sql_round_trips": counted["enqueue_sql_round_trips"],
            "connection_setup_statements": counted["connection_setup_statements"],
            "enqueue_rabbitmq_publishes": counted["enqueue_rabbitmq_publishes"],
            "worker_rabbitmq_publishes": counted["worker_rabbitmq_publishes"],
        },
        "api": api_figures(api),
        "memory": {
            "worker_pss_mb_idle": counted["pss_mb_idle"],
            "worker_pss_mb_loaded": jobrail["pss_mb_loaded"]["1"],
        },
        "batch": costs["batch"],
        "progress": costs["progress"],
        "fair_dispatch": fair,
        "fair_shares": shares,
        "worker_rounds": worker_rounds,
    }


def median_of(rounds: list[dict[str, Any]], name: str) -> Any:
    return statistics.median(r[name] for r in rounds)


async def measure_costs(quick: bool) -> dict[str, Any]:
    """A batch against plain jobs, progress reports against none: each a ratio of two
    measurements taken in alternating rounds of the same run. `quick`: two rounds each
    (both orders once) and fewer reporting jobs; the batch keeps its 1,000 members."""
    rounds = 2 if quick else 3
    step("a batch of 1,000 against 1,000 plain jobs")
    batch = await batch_cost.run(1000, rounds)
    step("progress reports against none")
    progress = await progress_cost.run(600 if quick else 2000, rounds)
    return {
        "ratios": {
            "batch_start_vs_plain": batch["ratio_start_batch_to_plain"],
            "batch_run_vs_plain": batch["ratio_run_batch_to_plain"],
            "progress_vs_plain": progress["ratio_progress_to_plain"],
        },
        "batch": {k: batch[k] for k in batch if k != "machine"},
        "progress": {k: progress[k] for k in progress if k != "machine"},
    }


def cost_rows(r: dict[str, Any]) -> list[tuple[str, str]]:
    b, p = r["batch"], r["progress"]
    start, rate = b["start_ms_per_1000_jobs"], b["run_jobs_per_s"]
    return [
        (
            f"batch of {b['jobs']:,} / {b['jobs']:,} plain jobs: start (ms per 1,000)",
            f"{start['batch']} / {start['plain']} ms ({b['ratio_start_batch_to_plain']}x)",
        ),
        (
            f"batch of {b['jobs']:,} / {b['jobs']:,} plain jobs: run (runner, no broker)",
            f"{rate['batch']} / {rate['plain']} jobs/s ({b['ratio_run_batch_to_plain']}x)",
        ),
        (
            f"{p['reports_per_job']} progress reports per job / none (runner, no broker)",
            f"{p['jobs_per_s']['progress']} / {p['jobs_per_s']['plain']} jobs/s "
            f"({p['ratio_progress_to_plain']}x, {p['progress_writes_per_job']} writes per job)",
        ),
    ]


def api_ratios(api: dict[str, Any]) -> dict[str, float]:
    """The ratios of each round (bench.api_load), and their median."""
    rounds = [_round_ratios(r) for r in api.get("rounds") or [api]]
    return {name: round(statistics.median(r[name] for r in rounds), 2) for name in rounds[0]}


def _round_ratios(api: dict[str, Any]) -> dict[str, float]:
    enqueue = api["enqueue"]
    return {
        "enqueue_p50_vs_health_p50": round(enqueue["p50_ms"] / api["health"]["p50_ms"], 2),
        "enqueue_vs_insert_kiq_peer": round(enqueue["rps"] / api["peer_insert_kiq"]["rps"], 2),
        "enqueue_vs_kiq_peer": round(enqueue["rps"] / api["peer_kiq"]["rps"], 2),
        # The same comparisons in CPU time per request (the peer's over jobrail's).
        "enqueue_cpu_vs_insert_kiq_peer": round(
            api["peer_insert_kiq"]["cpu_ms_per_request"] / enqueue["cpu_ms_per_request"], 2
        ),
        "enqueue_cpu_vs_health": round(
            enqueue["cpu_ms_per_request"] / api["health"]["cpu_ms_per_request"], 2
        ),
    }


def api_figures(api: dict[str, Any]) -> dict[str, Any]:
    figures: dict[str, Any] = {"concurrency": api["concurrency"]}
    for name in ("enqueue", "health", "peer_insert_kiq", "peer_kiq"):
        for measure in ("rps", "p50_ms", "p99_ms", "errors", "cpu_ms_per_request"):
            figures[f"{name}_{measure}"] = api[name][measure]
    if "rounds" in api:
        figures["rounds"] = api["rounds"]
    return figures


def api_rows(r: dict[str, Any]) -> list[tuple[str, str]]:
    a, ratios = r["api"], r["ratios"]

    def figures(name: str) -> str:
        errors = f", {a[f'{name}_errors']} errors" if a[f"{name}_errors"] else ""
        return (
            f"{a[f'{name}_rps']} req/s, p50 {a[f'{name}_p50_ms']} ms, "
            f"p99 {a[f'{name}_p99_ms']} ms, CPU {a[f'{name}_cpu_ms_per_request']} ms/req{errors}"
        )

    return [
        (f"API POST /demo/echo, concurrency {a['concurrency']}", figures("enqueue")),
        ("API GET /health, same server", figures("health")),
        ("peer: FastAPI route, asyncpg insert then .kiq()", figures("peer_insert_kiq")),
        ("peer: FastAPI route, .kiq() only", figures("peer_kiq")),
        (
            "ratio jobrail enqueue / insert-then-.kiq() peer (req/s)",
            f"{ratios['enqueue_vs_insert_kiq_peer']} (target >= 1.0)",
        ),
        ("ratio jobrail enqueue / .kiq()-only peer (req/s)", f"{ratios['enqueue_vs_kiq_peer']}"),
        ("enqueue p50 / health p50", f"{ratios['enqueue_p50_vs_health_p50']} (target <= 3)"),
        (
            "CPU per request: insert-then-.kiq() peer / jobrail enqueue",
            f"{ratios['enqueue_cpu_vs_insert_kiq_peer']}",
        ),
        ("CPU per request: jobrail enqueue / health", f"{ratios['enqueue_cpu_vs_health']}"),
    ]


def render(rows: list[tuple[str, str]]) -> list[str]:
    width = max(len(name) for name, _ in rows)
    lines = [f"| {'measure'.ljust(width)} | result |", f"|{'-' * (width + 2)}|---|"]
    lines += [f"| {name.ljust(width)} | {value} |" for name, value in rows]
    return lines


def table(r: dict[str, Any]) -> str:
    j = r["jobrail_jobs_per_s"]
    rows = [
        ("raw aio-pika (publish+confirm, consume+ack)", f"{r['raw_aio_pika_msgs_per_s']} msgs/s"),
        ("raw Taskiq no-op, 1 worker process", f"{r['raw_taskiq_tasks_per_s']} tasks/s"),
        (
            "seeds' Celery pipeline, 1 worker process",
            ", ".join(f"{k} {v}" for k, v in r["celery_pipeline_by_pool"].items()) + " jobs/s",
        ),
        (
            "jobrail end to end, 1 / 2 / 4 worker processes",
            f"{j['1']} / {j['2']} / {j['4']} jobs/s",
        ),
        (
            "jobrail worker CPU per job, 1 / 2 / 4 worker processes",
            " / ".join(
                str(r.get("jobrail_cpu_ms_per_job", {}).get(n, "-")) for n in ("1", "2", "4")
            )
            + " ms",
        ),
        ("jobrail enqueue (EnqueueJob, in process)", f"{r['jobrail_enqueue_jobs_per_s']} jobs/s"),
        (
            "ratio jobrail / raw Taskiq (1 process)",
            f"{r['ratios']['jobrail_vs_taskiq']} (target >= 0.5)",
        ),
        (
            "ratio jobrail / Celery pipeline (1 process)",
            f"{r['ratios']['jobrail_vs_celery']} (target >= 2.5)",
        ),
        *api_rows(r),
        (
            "per job: Redis scripts / worker SQL statements / enqueue SQL round trips",
            f"{r['per_job']['redis_round_trips']} / {r['per_job']['worker_sql_statements']} / "
            f"{r['per_job']['enqueue_sql_round_trips']} (targets <= 2 / 2 / 1)",
        ),
        (
            "SQL a new connection asks once (types, settings), counted apart, in all",
            f"{r['per_job'].get('connection_setup_statements', 0)} statements",
        ),
        (
            "per job: RabbitMQ publishes, enqueue / worker",
            f"{r['per_job']['enqueue_rabbitmq_publishes']} / "
            f"{r['per_job']['worker_rabbitmq_publishes']}",
        ),
        (
            "worker memory (PSS) idle / loaded",
            f"{r['memory']['worker_pss_mb_idle']} / {r['memory']['worker_pss_mb_loaded']} MB",
        ),
        *cost_rows(r),
        *fair_dispatch.rows(r["fair_dispatch"]),
        *fair_shares.rows(r["fair_shares"]),
    ]
    lines = render(rows)
    m = r["machine"]
    lines.append("")
    lines.append(
        f"Run {r['date']} on {m['cores']} cores, {m['memory_gb']} GB, Python {m['python']}."
    )
    return "\n".join(lines)


async def measure_api(seconds: float, rounds: int) -> dict[str, Any]:
    api = await api_load.run(concurrency=32, seconds=seconds, rounds=rounds)
    return {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "ratios": api_ratios(api),
        "api": api_figures(api),
    }


def main_api_only(runs: int, quick: bool) -> None:
    """`python -m bench.run --api-only [--quick] [--runs N]`: jobrail's API and its
    peers alone, N times back to back (the machine's noise shows in the spread); the
    last line gives the median of each ratio."""
    all_ratios: list[dict[str, float]] = []
    for _ in range(runs):
        started = time.time()
        results = asyncio.run(measure_api(3 if quick else 4, 2 if quick else 3))
        results["seconds"] = round(time.time() - started)
        write_json(RESULTS / f"api-{results['date'][:19].replace(':', '')}.json", results)
        print("\n".join(render(api_rows(results))), flush=True)
        print(json.dumps(results["ratios"]), f"({results['seconds']}s)", file=sys.stderr)
        all_ratios.append(results["ratios"])
    if runs > 1:
        medians = {name: statistics.median(r[name] for r in all_ratios) for name in all_ratios[0]}
        print("median of", runs, "runs:", json.dumps(medians))


def main_costs_only(quick: bool) -> None:
    """`python -m bench.run --costs-only [--quick]`: what a batch and progress reports
    cost, alone (under a minute)."""
    started = time.time()
    results: dict[str, Any] = {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        **asyncio.run(measure_costs(quick)),
    }
    results["seconds"] = round(time.time() - started)
    write_json(RESULTS / f"costs-{results['date'][:19].replace(':', '')}.json", results)
    print("\n".join(render(cost_rows(results))), flush=True)
    print(json.dumps(results["ratios"]), f"({results['seconds']}s)", file=sys.stderr)


def arguments(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.run",
        description="jobrail's benchmarks against raw Taskiq, Celery and plain FastAPI "
        "peers (bench/README.md). Without options: the whole set (about 10 minutes), "
        "written to bench/results/ and the README's table.",
    )
    only = parser.add_mutually_exclusive_group()
    only.add_argument("--api-only", action="store_true", help="the API and its peers alone")
    only.add_argument(
        "--costs-only", action="store_true", help="what a batch and progress reports cost"
    )
    parser.add_argument(
        "--quick", action="store_true", help="shorter runs (the README is left alone)"
    )
    parser.add_argument(
        "--runs", type=int, default=1, metavar="N", help="with --api-only: N runs back to back"
    )
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    return args


def main() -> None:
    args = arguments()
    if args.api_only:
        main_api_only(args.runs, args.quick)
        return
    if args.costs_only:
        main_costs_only(args.quick)
        return
    quick = args.quick
    started = time.time()
    results = asyncio.run(measure(quick))
    results["seconds"] = round(time.time() - started)
    write_json(RESULTS / "latest.json", results)
    write_json(RESULTS / f"{results['date'][:19].replace(':', '')}.json", results)
    rendered = table(results)
    print(rendered)
    if README.exists() and not quick:
        text = README.read_text()
        text = re.sub(
            r"<!-- results -->.*<!-- /results -->",
            f"<!-- results -->\n{rendered}\n<!-- /results -->",
            text,
            flags=re.S,
        )
        README.write_text(text)
    print(json.dumps(results["ratios"]), f"({results['seconds']}s)", file=sys.stderr)


if __name__ == "__main__":
    main()
