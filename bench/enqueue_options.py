"""What the enqueue options cost the API: `POST /demo/echo` plain, with a unique key its
active job already holds (every request after the first finds that job), and for a
tenant with a cap of 10,000 queued jobs, side by side in alternating rounds of one run.

python -m bench.enqueue_options [--rounds N] [--seconds S]

No worker runs, so every job stays queued: the capped tenant's line grows by each
round's enqueues, and the cap's count reads up to 10,000 index entries per enqueue
(its cost at a deep backlog); once the line is full, its enqueues are refused (429),
which the figures count as errors. Each figure is the median over the rounds.
"""

import argparse
import asyncio
import json
import os
import statistics
import subprocess
from typing import Any

from bench.api_load import ECHO_BODY, _request, jobrail_api, load
from bench.common import PYTHON, ROOT, unique
from bench.jobrail_e2e import Stack, cleanup, create_database
from jobrail.store.admin import drop_database

CAP = 10_000
MEASURES = ("plain", "unique_hit", "capped")


def _cli(stack: Stack, *args: str) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBRAIL_")}
    done = subprocess.run(
        [PYTHON, "-m", "jobrail.cli", "tenants", *args],
        env={**env, **stack.env()},
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    answer: dict[str, Any] = json.loads(done.stdout)
    return answer


async def run(concurrency: int = 32, seconds: float = 4.0, rounds: int = 3) -> dict[str, Any]:
    url = await create_database()
    stack = Stack(database_url=url, prefix=unique("bench."))
    try:
        async with jobrail_api(stack) as (server, port, key):
            capped = await asyncio.to_thread(_cli, stack, "create", "bench-capped")
            await asyncio.to_thread(_cli, stack, "set-cap", "bench-capped", str(CAP))
            requests = {
                "plain": _request("POST", "/demo/echo", ECHO_BODY, key),
                "unique_hit": _request("POST", "/demo/echo?unique_key=same", ECHO_BODY, key),
                "capped": _request("POST", "/demo/echo", ECHO_BODY, capped["api_key"]),
            }
            measured: list[dict[str, dict[str, float]]] = []
            for _ in range(rounds):
                measured.append({})
                for name in MEASURES:
                    measured[-1][name] = await load(
                        port, requests[name], concurrency, seconds, server.popen.pid
                    )
    finally:
        await cleanup(stack)
        await drop_database(url)
    result: dict[str, Any] = {"concurrency": concurrency, "rounds": measured}
    for name in MEASURES:
        result[name] = {
            figure: statistics.median(r[name][figure] for r in measured)
            for figure in measured[0][name]
        }
    result["ratios"] = {
        name: {
            "rps": round(
                statistics.median(r[name]["rps"] / r["plain"]["rps"] for r in measured), 3
            ),
            "cpu": round(
                statistics.median(
                    r[name]["cpu_ms_per_request"] / r["plain"]["cpu_ms_per_request"]
                    for r in measured
                ),
                3,
            ),
        }
        for name in MEASURES[1:]
    }
    return result


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=4.0)
    args = parser.parse_args()
    figures = asyncio.run(run(seconds=args.seconds, rounds=args.rounds))
    print(json.dumps({k: v for k, v in figures.items() if k != "rounds"}, indent=2))
    for i, measured in enumerate(figures["rounds"], 1):
        print(f"round {i}: " + json.dumps(measured))
