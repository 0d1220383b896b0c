"""Raw Taskiq: pre-load the queue, then one worker process drains it."""

import asyncio
import importlib
import os
import tempfile
import time
from pathlib import Path

from bench.common import PYTHON, consumers, delete_queues, spawn, unique, wait_until


async def run(tasks: int = 10_000) -> float:
    queue = unique("bench.taskiq.")
    os.environ["BENCH_QUEUE"] = queue
    from bench import raw_taskiq_app

    # Its broker is made at import, for the queue of BENCH_QUEUE: a new one for each run.
    raw_taskiq_app = importlib.reload(raw_taskiq_app)
    broker = raw_taskiq_app.broker
    marker = Path(tempfile.mkdtemp()) / "done"
    await broker.startup()
    try:
        for first in range(0, tasks, 500):
            await asyncio.gather(
                *(raw_taskiq_app.noop.kiq() for _ in range(min(500, tasks - first)))
            )
        await raw_taskiq_app.done.kiq(str(marker))
    finally:
        await broker.shutdown()
    worker = spawn(
        [
            PYTHON,
            "-m",
            "taskiq",
            "worker",
            "bench.raw_taskiq_app:broker",
            "--workers",
            "1",
            "--max-async-tasks",
            os.environ.get("BENCH_MAX_ASYNC", "64"),
            "--no-configure-logging",
        ],
        {"BENCH_QUEUE": queue, **{k: v for k, v in os.environ.items() if k.startswith("BENCH_")}},
        "taskiq",
    )
    try:
        await wait_until(lambda: consumers(queue), 30, "the taskiq worker")
        started = time.time()
        await wait_until(_exists(marker), 300, "the queue to drain", interval=0.02)
        finished = float(marker.read_text())
    finally:
        worker.stop()
        await delete_queues([queue, f"{queue}.dlq"], [f"{queue}.exchange"])
    return tasks / (finished - started)


def _exists(path: Path):  # type: ignore[no-untyped-def]
    async def check() -> bool:
        return await asyncio.to_thread(lambda: path.exists() and bool(path.read_text()))

    return check


if __name__ == "__main__":
    print(f"{asyncio.run(run()):.0f} tasks/s")
