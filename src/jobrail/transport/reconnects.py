"""What a worker says when its RabbitMQ connection drops and comes back.

aio-pika's robust connections reconnect on their own and restore their channels and
consumers; the messages a worker had not acknowledged go back to their queue, and
the claims in the database keep their jobs from running twice. That is the expected
path of a broker restart, and it says so once: one WARNING when the connection is
lost, another every `still_down_every` while it stays lost (with the error of the
last reconnection attempt), and one INFO when every connection is back (with how many
acknowledgements the dead channels took with them). What aio-pika and aiormq log on
the way (a reader that exited, a remote close, each attempt refused while the broker
is away) is demoted by `jobrail.telemetry.logging`'s filter, so that an operator's
ERROR and WARNING counts mean something; the reminder still says why it keeps failing.

aio-pika reports a failed reconnection attempt only in its log (its reconnect loop
calls no callback), so the watch reads those records, from the watched connections
only, with a logger filter that changes nothing.
"""

import asyncio
import logging
import re
import time
from collections.abc import Callable
from typing import Any

from aio_pika.abc import AbstractRobustConnection

log = logging.getLogger("jobrail.broker")

# aio-pika's reconnect loop and what it logs when an attempt fails (its format strings):
# args (connection, error, interval) and (connection, error type name, error, interval).
_ATTEMPTS_LOGGER = "aio_pika.robust_connection"
_ATTEMPT_FAILED = 'Connection attempt to "%s" failed: %s. Reconnecting after %r seconds.'
_RECONNECT_FAILED = "Reconnect attempt failed %s due to %s: %s. Retrying after %r seconds."
# The password of any URL in an error's text (amqp://user:password@host).
_URL_PASSWORD = re.compile(r"(\w+://[^:/@\s]*:)[^@\s]*@")


class ConnectionWatch:
    def __init__(self, still_down_every: float = 60.0) -> None:
        self._still_down_every = still_down_every
        self._down: set[int] = set()
        self._since = 0.0
        self._lost_acks = 0
        self._reminder: asyncio.TimerHandle | None = None
        self._stopping = False
        # id(connection): its name and its URL's password (never to be logged).
        self._watched: dict[int, tuple[str, str | None]] = {}
        self._last_attempt: str | None = None
        self._attempts = _FailedAttempts(self._attempt_failed)

    def watch(self, connection: AbstractRobustConnection, name: str) -> None:
        """Follow `connection` (called `name` in the log) from now on."""
        # aio-pika's connections have their URL as `url`; its abstract class omits it.
        password = getattr(getattr(connection, "url", None), "password", None)
        self._watched[id(connection)] = (name, password if isinstance(password, str) else None)
        connection.close_callbacks.add(lambda _sender, exc: self._lost(connection, name, exc))
        connection.reconnect_callbacks.add(lambda _sender: self._back(connection))
        attempts = logging.getLogger(_ATTEMPTS_LOGGER)
        if self._attempts not in attempts.filters:
            attempts.addFilter(self._attempts)

    def stopping(self) -> None:
        """The broker is shutting down: its connections closing is no loss."""
        self._stopping = True
        logging.getLogger(_ATTEMPTS_LOGGER).removeFilter(self._attempts)
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
        self._last_attempt = None
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
            "still no connection to RabbitMQ after %.0fs; reconnecting (last attempt: %s)",
            time.monotonic() - self._since,
            self._last_attempt or "none has failed yet",
        )
        self._remind_later()

    def _attempt_failed(self, connection: object, exc: object) -> None:
        watched = self._watched.get(id(connection))
        if watched is None or not self._down:
            return
        name, password = watched
        self._last_attempt = f"{name}: {_secret_free(_attempt_error(exc), password)}"


def _why(exc: Any) -> str:
    if exc is None:
        return "closed"
    if isinstance(exc, BaseException):
        return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    return str(exc)


def _attempt_error(exc: object) -> str:
    """The error's type and message, and what it wraps (aiormq wraps the socket's
    error in a plain AMQPConnectionError)."""
    text = _why(exc)
    cause = exc.__cause__ if isinstance(exc, BaseException) else None
    if cause is not None and not isinstance(cause, asyncio.CancelledError):
        text += f" (from {_why(cause)})"
    return text


def _secret_free(text: str, password: str | None) -> str:
    if password:
        text = text.replace(password, "******")
    return _URL_PASSWORD.sub(r"\1******@", text)


class _FailedAttempts(logging.Filter):
    """Passes every record on unchanged; hands each failed attempt's connection and
    error to `noted`."""

    def __init__(self, noted: Callable[[object, object], None]) -> None:
        super().__init__()
        self._noted = noted

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args if isinstance(record.args, tuple) else ()
        if record.msg == _ATTEMPT_FAILED and len(args) >= 2:
            self._noted(args[0], args[1])
        elif record.msg == _RECONNECT_FAILED and len(args) >= 3:
            self._noted(args[0], args[2])
        return True
