"""What the limits treat as "Redis unavailable", the warning said once per interval, and
the background retries of a release that failed."""

import asyncio
import logging
from typing import Any

import pytest
from redis.exceptions import (
    AskError,
    ClusterDownError,
    MasterDownError,
    MovedError,
    ResponseError,
    SlotNotCoveredError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from jobrail.kernel.throttled_log import ThrottledLog
from jobrail.limits.memory import MemoryLimits
from jobrail.limits.model import Acquire, Grant, LimitsUnavailableError, Lock
from jobrail.limits.redis_errors import unreachable
from jobrail.worker.releases import ReleaseRetries


def _raised_in(module: str, error: Exception) -> Exception:
    """`error` as raised by code of `module` (its innermost frame is that module's)."""
    namespace: dict[str, Any] = {"__name__": module, "error": error}
    exec("def fail():\n    raise error\n", namespace)
    try:
        namespace["fail"]()
    except Exception as exc:
        return exc
    raise AssertionError("unreachable")


@pytest.mark.parametrize(
    "error",
    [
        RedisConnectionError("Error 111 connecting to 127.0.0.1:7105. Connection refused."),
        RedisTimeoutError("Timeout reading from socket"),
        ClusterDownError("The cluster is down"),
        MasterDownError("Link with MASTER is down"),
        TryAgainError("Multiple keys request during rehashing of slot"),
        MovedError("3999 127.0.0.1:6381"),
        AskError("3999 127.0.0.1:6381"),
        SlotNotCoveredError('Slot "3999" is not covered by the cluster.'),
        ConnectionResetError(104, "Connection reset by peer"),
    ],
)
def test_every_error_of_a_lost_or_failing_over_node_is_unreachable(error: Exception) -> None:
    assert unreachable(error)


def test_a_closed_connection_inside_the_driver_is_unreachable() -> None:
    writer_gone = AttributeError("'NoneType' object has no attribute 'writelines'")
    handler_closed = RuntimeError(
        "unable to perform operation on <TCPTransport>; the handler is closed"
    )

    assert unreachable(_raised_in("redis.asyncio.connection", writer_gone))
    assert unreachable(_raised_in("asyncio.selector_events", handler_closed))


def test_the_same_errors_from_jobrails_own_code_are_bugs_not_outages() -> None:
    assert not unreachable(_raised_in("jobrail.limits.redis", AttributeError("typo")))
    assert not unreachable(_raised_in("jobrail.worker.gate", RuntimeError("bug")))
    assert not unreachable(AttributeError("never raised"))
    assert not unreachable(ValueError("bad argument"))


def test_a_script_error_is_a_response_error_and_so_unavailable() -> None:
    # Unchanged from before: the limits cannot be checked, limited work waits.
    assert unreachable(ResponseError("ERR Error running script"))


def test_a_throttled_warning_is_said_once_per_interval_with_how_many_it_stands_for(
    caplog: pytest.LogCaptureFixture,
) -> None:
    now = [100.0]
    warn = ThrottledLog(logging.getLogger("test.throttled"), every_s=10, clock=lambda: now[0])
    caplog.set_level(logging.WARNING, "test.throttled")

    said = [warn("store away (%s)", n) for n in range(5)]
    now[0] += 10
    said.append(warn("store away (%s)", "again"))

    assert said == [True, False, False, False, False, True]
    assert [r.getMessage() for r in caplog.records] == [
        "store away (0)",
        "store away (again) (and 4 more like it in the last 10 s)",
    ]
    assert all(r.levelno == logging.WARNING for r in caplog.records)


class FlakyStore(MemoryLimits):
    """Memory limits whose releases fail while `down` (as a store that cannot be reached)."""

    def __init__(self) -> None:
        super().__init__()
        self.down = True
        self.tries = 0

    async def release(
        self, grant: Grant, *, refund: bool = False, now_ms: float | None = None
    ) -> None:
        self.tries += 1
        if self.down:
            raise LimitsUnavailableError("Redis unavailable: ConnectionError")
        await super().release(grant, refund=refund, now_ms=now_ms)


LOCK = Acquire(Lock(key="account:acme:a1", ttl_s=60), "account:acme:a1")


async def _waits() -> tuple[list[float], Any]:
    waits: list[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)
        await asyncio.sleep(0)

    return waits, sleep


async def test_a_failed_release_is_tried_again_until_the_store_answers() -> None:
    store = FlakyStore()
    admission = await store.admit([LOCK], holder="job-1/h")
    assert admission.grant is not None
    waits, sleep = await _waits()
    retries = ReleaseRetries(store, tries=8, first_wait_s=0.25, max_wait_s=2.0, sleep=sleep)

    retries.add(admission.grant, LimitsUnavailableError("away"))
    while len(waits) < 3:
        await asyncio.sleep(0)
    store.down = False
    while retries.pending:
        await asyncio.sleep(0)

    assert retries.released == 1
    assert retries.given_up == 0
    assert waits[:3] == [0.25, 0.5, 1.0]
    assert await store.holders(LOCK) == []
    assert (await store.admit([LOCK], holder="job-2/h")).allowed


async def test_a_release_that_keeps_failing_is_given_up_after_its_tries(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = FlakyStore()
    admission = await store.admit([LOCK], holder="job-1/h")
    assert admission.grant is not None
    waits, sleep = await _waits()
    retries = ReleaseRetries(store, tries=4, first_wait_s=0.25, max_wait_s=1.0, sleep=sleep)
    caplog.set_level(logging.WARNING, "jobrail.limits")

    retries.add(admission.grant, LimitsUnavailableError("away"))
    while retries.pending:
        await asyncio.sleep(0)

    assert store.tries == 4
    assert waits == [0.25, 0.5, 1.0, 1.0]
    assert retries.given_up == 1
    assert [h["holder"] for h in await store.holders(LOCK)] == ["job-1/h"]  # left to its TTL
    assert all(r.levelno < logging.ERROR for r in caplog.records)


async def test_retries_stop_at_close() -> None:
    store = FlakyStore()
    admission = await store.admit([LOCK], holder="job-1/h")
    assert admission.grant is not None
    retries = ReleaseRetries(store, first_wait_s=60)

    retries.add(admission.grant, LimitsUnavailableError("away"))
    assert retries.pending == 1
    await retries.close()

    assert retries.pending == 0
    assert store.tries == 0
