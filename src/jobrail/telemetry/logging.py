"""JSON log lines that say which request, job and trace they belong to.

Every line is one JSON object. Besides the record's own extra fields it carries the
fields of the current log context (``request_id`` and ``tenant_id`` in an API request;
``job_id``, ``job_type``, ``task_id`` and ``tenant_id`` while a worker handles a job
message) and the ``trace_id``/``span_id`` of the current span. The context lives in a
contextvar, so concurrent requests and jobs on one event loop never mix their fields.
"""

import json
import logging
import sys
from collections.abc import Mapping
from contextlib import AbstractContextManager
from contextvars import ContextVar, Token
from datetime import UTC, datetime
from types import MappingProxyType, TracebackType
from typing import Any

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
    close (320 CONNECTION_FORCED: shut down, or closed by an operator), each failed
    reconnection attempt (and its refused connect), and a closed channel's close
    callback failing on its closed connection. jobrail's broker says once, at WARNING,
    that the connection was lost (``jobrail.messaging.reconnects``); at ERROR these
    would each look like a fault.

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
_ATTEMPT_FAILED = 'Connection attempt to "%s" '
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
            # args: the error; refused or reset while the broker is down.
            return bool(args) and (
                isinstance(args[0], OSError) or type(args[0]).__name__ == "AMQPConnectionError"
            )
        # args: the connection, the reply code, the reply text.
        return message.startswith(_REMOTE_CLOSE) and args[1:2] == (_CONNECTION_FORCED,)
    if record.name == "aio_pika.robust_connection":
        return message.startswith(_ATTEMPT_FAILED)
    if record.name == "aio_pika.tools" and message == _CALLBACK_ERROR and len(args) == 3:
        # args: the callback, the exception's type name, the exception.
        callback, kind, exc = args
        return (
            "._on_close of" in repr(callback)
            and kind in _CLOSED_ERRORS
            and (kind != "RuntimeError" or str(exc).endswith("closed"))
        )
    return False


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
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    handler.addFilter(LogContextFilter())
    handler.addFilter(ExpectedReconnectFilter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    # Per-message chatter from the libraries is not useful at INFO.
    for noisy in ("taskiq.receiver.receiver", "aio_pika", "aiormq", "uvicorn.access"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, logging.getLevelName(level)))
