"""What a worker says when its RabbitMQ connection drops and comes back.

aio-pika's robust connections reconnect on their own and restore their channels and
consumers; the messages a worker had not acknowledged go back to their queue, and
the claims in the database keep their jobs from running twice. That is the expected
path of a broker restart, and it says so once: one WARNING when the connection is
lost, another every `still_down_every` while it stays lost, and one INFO when every
connection is back (with how many acknowledgements the dead channels took with
them). What aio-pika and aiormq log on the way (a reader that exited, a remote
close, each failed attempt) is demoted by `jobrail.telemetry.logging`'s filter, so
that an operator's ERROR and WARNING counts mean something.
"""

import asyncio
import logging
import time
from typing import Any

from aio_pika.abc import AbstractRobustConnection

log = logging.getLogger("jobrail.broker")


class ConnectionWatch:
    def __init__(self, still_down_every: float = 60.0) -> None:
        self._still_down_every = still_down_every
        self._down: set[int] = set()
        self._since = 0.0
        self._lost_acks = 0
        self._reminder: asyncio.TimerHandle | None = None
        self._stopping = False

    def watch(self, connection: AbstractRobustConnection, name: str) -> None:
        """Follow `connection` (called `name` in the log) from now on."""
        connection.close_callbacks.add(lambda _sender, exc: self._lost(connection, name, exc))
        connection.reconnect_callbacks.add(lambda _sender: self._back(connection))

    def stopping(self) -> None:
        """The broker is shutting down: its connections closing is no loss."""
        self._stopping = True
        if self._reminder is not None:
            self._reminder.cancel()

    def ack_lost(self) -> None:
        """An acknowledgement could not be sent: its channel had closed."""
        self._lost_acks += 1

    def _lost(self, connection: AbstractRobustConnection, name: str, exc: Any) -> None:
        if self._stopping or connection.close_called or id(connection) in self._down:
            return
        first = not self._down
        self._down.add(id(connection))
        if not first:
            return
        self._since = time.monotonic()
        self._lost_acks = 0
        log.warning(
            "lost the connection to RabbitMQ (%s: %s); reconnecting. Messages not yet "
            "acknowledged go back to their queue; their jobs' claims keep them from "
            "running twice",
            name,
            _why(exc),
        )
        self._remind_later()

    def _back(self, connection: AbstractRobustConnection) -> None:
        self._down.discard(id(connection))
        if self._down or self._stopping:
            return
        if self._reminder is not None:
            self._reminder.cancel()
            self._reminder = None
        log.info(
            "reconnected to RabbitMQ after %.1fs; %d acknowledgements were lost with the "
            "old channels (RabbitMQ redelivers those messages, and their jobs, already "
            "recorded, do not run again)",
            time.monotonic() - self._since,
            self._lost_acks,
        )

    def _remind_later(self) -> None:
        loop = asyncio.get_running_loop()
        self._reminder = loop.call_later(self._still_down_every, self._remind)

    def _remind(self) -> None:
        if not self._down or self._stopping:
            return
        log.warning(
            "still no connection to RabbitMQ after %.0fs; reconnecting",
            time.monotonic() - self._since,
        )
        self._remind_later()


def _why(exc: Any) -> str:
    if exc is None:
        return "closed"
    if isinstance(exc, BaseException):
        return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    return str(exc)
