"""Plain Taskiq on taskiq-aio-pika: a no-op task, and a last task that notes the time."""

import os
import time
from pathlib import Path

from taskiq_aio_pika import AioPikaBroker, Exchange, Queue

QUEUE = os.environ.get("BENCH_QUEUE", "bench.taskiq")

broker = AioPikaBroker(
    os.environ.get("BENCH_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/"),
    qos=int(os.environ.get("BENCH_PREFETCH", "32")),
    exchange=Exchange(name=f"{QUEUE}.exchange"),
    task_queues=[Queue(name=QUEUE)],
    dead_letter_queue=Queue(name=f"{QUEUE}.dlq"),
)


@broker.task(task_name="bench.noop")
async def noop() -> None:
    return None


@broker.task(task_name="bench.done")
async def done(path: str) -> None:
    Path(path).write_text(repr(time.time()))  # noqa: ASYNC240 - once, at the very end
