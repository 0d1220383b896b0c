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
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    # Per-message chatter from the libraries is not useful at INFO.
    for noisy in ("taskiq.receiver.receiver", "aio_pika", "aiormq", "uvicorn.access"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, logging.getLevelName(level)))
