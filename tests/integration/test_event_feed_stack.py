"""The job event feed in the stack (Postgres, RabbitMQ, worker processes): a client that
disconnects and resumes with Last-Event-ID while two workers run its 24 jobs loses no
event and sees none twice. (24: the stack's enqueue limit is 30 a minute.)"""

from collections.abc import Callable
from typing import Any

from tests.support.feed import disconnect_and_resume
from tests.support.fixtures import ApiClient


async def test_a_resumed_stream_loses_nothing_while_workers_write_concurrently(
    api: ApiClient, workers: Callable[..., Any]
) -> None:
    await workers("worker-1")
    await workers("worker-2")
    await disconnect_and_resume(api, jobs=12, timeout=60)
