"""The broker says once that RabbitMQ went away, and once that it is back."""

import asyncio
import logging
import ssl
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from aiormq.exceptions import AMQPConnectionError, ProbableAuthenticationError
from yarl import URL

from jobrail.transport.reconnects import ConnectionWatch

PASSWORD = "s3cret-rotated"


class FakeConnection:
    """The two callback lists of an aio-pika robust connection, fired by the test."""

    def __init__(self) -> None:
        self.url = URL(f"amqp://jobrail:{PASSWORD}@rabbit.internal:5672/")
        self.close_called = False
        self._closed: list[Callable[..., Any]] = []
        self._back: list[Callable[..., Any]] = []
        self.close_callbacks = self._Callbacks(self._closed)
        self.reconnect_callbacks = self._Callbacks(self._back)

    class _Callbacks:
        def __init__(self, into: list[Callable[..., Any]]) -> None:
            self._into = into

        def add(self, callback: Callable[..., Any]) -> None:
            self._into.append(callback)

    def lose(self, exc: BaseException | None) -> None:
        for callback in self._closed:
            callback(self, exc)

    def come_back(self) -> None:
        for callback in self._back:
            callback(self)

    def attempt_fails(self, exc: BaseException) -> None:
        """What aio-pika's reconnect loop logs when an attempt fails (its own call)."""
        logging.getLogger("aio_pika.robust_connection").warning(
            'Connection attempt to "%s" failed: %s. Reconnecting after %r seconds.',
            self,
            exc,
            5,
        )

    def __str__(self) -> str:
        return str(self.url.with_password("******"))


def broker_lines(caplog: pytest.LogCaptureFixture) -> list[tuple[int, str]]:
    return [(r.levelno, r.getMessage()) for r in caplog.records if r.name == "jobrail.broker"]


async def test_two_connections_lost_together_make_one_warning_and_one_info(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, "jobrail.broker")
    watch = ConnectionWatch()
    publishing, consuming = FakeConnection(), FakeConnection()
    watch.watch(publishing, "publishing connection")  # type: ignore[arg-type]
    watch.watch(consuming, "consuming connection")  # type: ignore[arg-type]

    publishing.lose(ConnectionResetError("reset"))
    consuming.lose(ConnectionResetError("reset"))
    consuming.lose(OSError("refused"))  # a failed attempt while still down
    watch.ack_lost()
    watch.ack_lost()
    publishing.come_back()
    consuming.come_back()

    lines = broker_lines(caplog)
    assert [level for level, _ in lines] == [logging.WARNING, logging.INFO]
    assert lines[0][1].startswith("lost the connection to RabbitMQ (publishing connection")
    assert lines[1][1].startswith("reconnected to RabbitMQ after")
    assert "2 acknowledgements were lost" in lines[1][1]


def reminders(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [m for _, m in broker_lines(caplog) if m.startswith("still no connection")]


async def reminded(caplog: pytest.LogCaptureFixture, count: int) -> list[str]:
    """Wait (generously: the machine may be loaded) until `count` reminders are logged."""
    deadline = time.monotonic() + 30
    while len(reminders(caplog)) < count:
        assert time.monotonic() < deadline, f"{count} reminders expected: {reminders(caplog)}"
        await asyncio.sleep(0.01)
    return reminders(caplog)


@pytest.fixture
def watch() -> Iterator[ConnectionWatch]:
    watch = ConnectionWatch(still_down_every=0.05)
    yield watch
    watch.stopping()  # takes its filter off aio-pika's logger


async def test_a_long_outage_is_recalled_while_it_lasts(
    caplog: pytest.LogCaptureFixture, watch: ConnectionWatch
) -> None:
    caplog.set_level(logging.INFO, "jobrail.broker")
    connection = FakeConnection()
    watch.watch(connection, "consuming connection")  # type: ignore[arg-type]

    connection.lose(None)
    await reminded(caplog, 2)
    connection.come_back()
    after_back = len(reminders(caplog))
    await asyncio.sleep(0.2)  # four reminder periods: none comes once it is back

    levels = [level for level, _ in broker_lines(caplog)]
    assert levels[0] == logging.WARNING
    assert levels[-1] == logging.INFO
    assert len(reminders(caplog)) == after_back
    assert reminders(caplog)[0].endswith("(last attempt: none has failed yet)")


def wrapped(cause: OSError) -> AMQPConnectionError:
    """What aiormq raises for a socket's error: ``AMQPConnectionError(*e.args) from e``."""
    try:
        raise AMQPConnectionError(*cause.args) from cause
    except AMQPConnectionError as exc:
        return exc


@pytest.mark.parametrize(
    ("error", "shown"),
    [
        (
            ProbableAuthenticationError("ACCESS_REFUSED - Login was refused"),
            "consuming connection: ProbableAuthenticationError: ACCESS_REFUSED - Login was refused",
        ),
        (
            wrapped(ssl.SSLCertVerificationError(1, "[SSL: CERTIFICATE_VERIFY_FAILED] no")),
            "consuming connection: AMQPConnectionError: [Errno 1] [SSL: "
            "CERTIFICATE_VERIFY_FAILED] no (from SSLCertVerificationError: [SSL: "
            "CERTIFICATE_VERIFY_FAILED] no)",
        ),
        (
            RuntimeError(f"amqp://jobrail:{PASSWORD}@rabbit.internal:5672/ closed"),
            "consuming connection: RuntimeError: amqp://jobrail:******@rabbit.internal:5672/ "
            "closed",
        ),
        (
            ValueError(f"login jobrail/{PASSWORD} refused"),
            "consuming connection: ValueError: login jobrail/****** refused",
        ),
    ],
    ids=["access refused", "bad certificate", "url in the error", "password in the error"],
)
async def test_the_reminder_says_why_the_last_attempt_failed_without_the_password(
    caplog: pytest.LogCaptureFixture, watch: ConnectionWatch, error: BaseException, shown: str
) -> None:
    caplog.set_level(logging.INFO, "jobrail.broker")
    connection, other = FakeConnection(), FakeConnection()
    watch.watch(connection, "consuming connection")  # type: ignore[arg-type]

    connection.lose(ConnectionResetError("reset"))
    connection.attempt_fails(wrapped(ConnectionRefusedError(111, "Connect call failed")))
    connection.attempt_fails(error)
    other.attempt_fails(OSError("not one of the watched connections"))
    [first, *_] = await reminded(caplog, 1)

    assert first.endswith(f"(last attempt: {shown})")
    assert all(PASSWORD not in line for _, line in broker_lines(caplog))


async def test_connections_closed_by_a_shutdown_are_no_loss(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, "jobrail.broker")
    watch = ConnectionWatch()
    ours, closed_by_us = FakeConnection(), FakeConnection()
    watch.watch(ours, "publishing connection")  # type: ignore[arg-type]
    watch.watch(closed_by_us, "consuming connection")  # type: ignore[arg-type]

    closed_by_us.close_called = True
    closed_by_us.lose(None)
    watch.stopping()
    ours.lose(None)

    assert broker_lines(caplog) == []
