"""JSON log lines that say which request, job and trace they belong to.

Every line is one JSON object. Besides the record's own extra fields it carries the
fields of the current log context (``request_id`` and ``tenant_id`` in an API request;
``job_id``, ``job_type``, ``task_id`` and ``tenant_id`` while a worker handles a job
message) and the ``trace_id``/``span_id`` of the current span. The context lives in a
contextvar, so concurrent requests and jobs on one event loop never mix their fields.

Only jobrail's own processes (``jobrail api``, ``run``, ``worker``, ``scheduler``) call
``configure_logging``. In a host's process (a ``JobRail`` in its app) jobrail configures
nothing: its loggers, all under ``jobrail``, have no handler or level of their own and
propagate, so its lines (a job's retry among them) reach whatever handlers and levels the
host set up, and Python's last-resort handler (WARNING and above, on stderr) where it set
up none.
"""

import asyncio
import errno
import json
import logging
import re
import ssl
import sys
from collections.abc import Mapping
from contextlib import AbstractContextManager
from contextvars import ContextVar, Token
from datetime import UTC, datetime
from types import MappingProxyType, TracebackType
from typing import Any

from aiormq.exceptions import AMQPConnectionError
from opentelemetry import trace

_STANDARD = set(logging.LogRecord("", 0, "", 0, "", (), None).__dict__) | {"message", "asctime"}

_NOTHING: Mapping[str, object] = MappingProxyType({})
_fields: ContextVar[Mapping[str, object]] = ContextVar("jobrail_log_fields", default=_NOTHING)


def log_context(fields: Mapping[str, object]) -> AbstractContextManager[None]:
    """Log `fields` with every record inside the block (they replace the outer ones).
    A mapping whose values change while the block runs is read at each record."""
    return _LogContext(fields)


class _LogContext:
    __slots__ = ("_fields", "_token")

    def __init__(self, fields: Mapping[str, object]) -> None:
        self._fields = fields

    def __enter__(self) -> None:
        self._token: Token[Mapping[str, object]] = _fields.set(self._fields)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        _fields.reset(self._token)


class LogContextFilter(logging.Filter):
    """Adds the log context and the current trace to each record (never overriding
    a field the call passed in `extra`)."""

    def filter(self, record: logging.LogRecord) -> bool:
        entry = record.__dict__
        for key, value in _fields.get().items():
            entry.setdefault(key, value)
        span_context = trace.get_current_span().get_span_context()
        if span_context.is_valid:
            entry.setdefault("trace_id", format(span_context.trace_id, "032x"))
            entry.setdefault("span_id", format(span_context.span_id, "016x"))
        return True


class ExpectedReconnectFilter(logging.Filter):
    """Demotes to INFO what aio-pika and aiormq log at WARNING or ERROR on the expected
    path of a broker restart: the connection's reader exiting, the broker's forced
    close (320 CONNECTION_FORCED: shut down, or closed by an operator), each
    reconnection attempt that failed because the broker was away (the connection
    refused or reset, or closed by the broker before the handshake: `is_broker_away`),
    and a closed channel's close callback failing on its closed connection. jobrail's
    broker says once, at WARNING, that the connection was lost, and every minute while
    it stays lost with the last attempt's error (``jobrail.transport.reconnects``); at
    ERROR these would each look like a fault.

    An attempt that failed for any other reason keeps its level: a refused login
    (ProbableAuthenticationError, ACCESS_REFUSED: rotated credentials), a TLS error
    (ssl.SSLError, a certificate that does not verify), a timeout, a refused vhost.
    Those do not heal by waiting, and an operator has to see them.

    A demoted record is dropped unless its logger is enabled for INFO (the libraries'
    loggers are set to WARNING by `configure_logging`, unless the level is DEBUG).
    Anything else those libraries log keeps its level."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING or not _expected_on_reconnect(record):
            return True
        record.levelno, record.levelname = logging.INFO, "INFO"
        record.__dict__["demoted_from"] = "reconnect"
        return logging.getLogger(record.name).isEnabledFor(logging.INFO)


_CONNECTION_FORCED = 320
# The library messages (their format strings) that are part of an expected reconnect.
_READER_EXITED = "Cancelling cause reader exited abnormally"
_REMOTE_CLOSE = "Unexpected connection close from remote"
_ATTEMPT_FAILED = 'Connection attempt to "%s" failed: %s. Reconnecting after %r seconds.'
_NO_TRANSPORT = "error when creating transport: %r"
_CALLBACK_ERROR = "Callback %r error: %s: %s"
_CLOSED_ERRORS = {"RuntimeError", "ChannelInvalidStateError", "ConnectionClosed"}


def _expected_on_reconnect(record: logging.LogRecord) -> bool:
    message = str(record.msg)
    args = record.args if isinstance(record.args, tuple) else ()
    if record.name == "aiormq.connection":
        if message == _READER_EXITED:
            return True
        if message == _NO_TRANSPORT:
            # args: the error.
            return bool(args) and is_broker_away(args[0])
        # args: the connection, the reply code, the reply text.
        return message.startswith(_REMOTE_CLOSE) and args[1:2] == (_CONNECTION_FORCED,)
    if record.name == "aio_pika.robust_connection" and message == _ATTEMPT_FAILED:
        # args: the connection, the error, the interval.
        return len(args) >= 2 and is_broker_away(args[1])
    if record.name == "aio_pika.tools" and message == _CALLBACK_ERROR and len(args) == 3:
        # args: the callback, the exception's type name, the exception.
        callback, kind, exc = args
        return (
            "._on_close of" in repr(callback)
            and kind in _CLOSED_ERRORS
            and (kind != "RuntimeError" or str(exc).endswith("closed"))
        )
    return False


def is_broker_away(exc: object) -> bool:
    """Whether a connection attempt failed only because the broker is not there (yet):
    its connect was refused, its connection reset, or the broker closed it before the
    AMQP handshake (a plain AMQPConnectionError: RabbitMQ starting or stopping). Never
    a TLS error, a refused login or another AMQP refusal (AMQPConnectionError's
    subclasses: ProbableAuthenticationError, AuthenticationError, ConnectionClosed...)."""
    if not isinstance(exc, BaseException) or isinstance(exc, ssl.SSLError | ssl.CertificateError):
        return False
    if isinstance(exc, ConnectionRefusedError | ConnectionResetError):
        return True
    if type(exc) is not AMQPConnectionError:
        return False
    # aiormq wraps what the socket raised: `raise AMQPConnectionError(*e.args) from e`.
    cause = exc.__cause__
    if cause is None or isinstance(cause, asyncio.IncompleteReadError):
        return True  # the broker closed the connection (EOF during the handshake)
    if isinstance(cause, ssl.SSLError | ssl.CertificateError):
        return False
    if isinstance(cause, ConnectionRefusedError | ConnectionResetError):
        return True
    return _all_refused(cause)


def _all_refused(exc: BaseException) -> bool:
    # A host name with several addresses (IPv6 and IPv4) makes asyncio raise one plain
    # OSError("Multiple exceptions: [Errno 111] ..., [Errno 111] ...") instead of the
    # ConnectionRefusedErrors themselves; only its text says what each address did.
    if type(exc) is not OSError or exc.errno is not None:
        return False
    text = str(exc)
    codes = _ERRNO.findall(text)
    return (
        text.startswith("Multiple exceptions: ")
        and bool(codes)
        and all(int(code) == errno.ECONNREFUSED for code in codes)
    )


_ERRNO = re.compile(r"\[Errno (\d+)\]")


class JsonFormatter(logging.Formatter):
    """One JSON object per line, with whatever extra fields the record carries."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in record.__dict__.items():
            if key not in _STANDARD and not key.startswith("_"):
                entry[key] = value
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


def configure_logging(level: str = "INFO") -> None:
    """JSON lines on stderr for the whole of a process of jobrail's own: the root
    logger's handlers are replaced and its level set. Never called in a host's process."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    handler.addFilter(LogContextFilter())
    handler.addFilter(ExpectedReconnectFilter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    # Per-message chatter from the libraries is not useful at INFO. httpx's names every
    # request's whole URL, which for a webhook may be its secret (a Slack-style path).
    noisy_loggers = ("taskiq.receiver.receiver", "aio_pika", "aiormq", "uvicorn.access", "httpx")
    for noisy in noisy_loggers:
        logging.getLogger(noisy).setLevel(max(logging.WARNING, logging.getLevelName(level)))
