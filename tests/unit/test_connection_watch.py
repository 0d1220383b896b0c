"""The broker says once that RabbitMQ went away, and once that it is back."""

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import pytest

from jobrail.messaging.reconnects import ConnectionWatch


class FakeConnection:
    """The two callback lists of an aio-pika robust connection, fired by the test."""

    def __init__(self) -> None:
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


async def test_a_long_outage_is_recalled_while_it_lasts(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, "jobrail.broker")
    watch = ConnectionWatch(still_down_every=0.05)
    connection = FakeConnection()
    watch.watch(connection, "consuming connection")  # type: ignore[arg-type]

    connection.lose(None)
    await asyncio.sleep(0.18)
    connection.come_back()
    await asyncio.sleep(0.1)

    levels = [level for level, _ in broker_lines(caplog)]
    assert levels[0] == logging.WARNING
    assert levels[-1] == logging.INFO
    reminders = [m for _, m in broker_lines(caplog) if m.startswith("still no connection")]
    assert 2 <= len(reminders) <= 4  # and none after it came back


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
