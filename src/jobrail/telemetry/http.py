"""Per HTTP request: a request id, a server span and the log context.

The request id is the caller's ``X-Request-Id`` when it looks like an id (letters,
digits and ``._:@/+=-``, at most 128 characters), else a new UUID; the response
returns it in ``X-Request-Id``. An incoming W3C ``traceparent`` is honoured, so a
caller's trace continues through the API into the workers.

The span holds the method, the route template, the path and the status, never
headers, the query string or the body: keys and payloads stay out of traces. The
tenant is added to logs and span once authentication has put the principal in the
request state (``jobrail.http.auth``).

Each request is also counted and timed by route template and status
(``jobrail.telemetry.http_metrics``), in the series the app's lifespan puts in its
state as ``http_metrics``.
"""

import logging
import re
import time
import uuid
from collections.abc import ItemsView, Iterator, Mapping
from typing import Any

from opentelemetry import context, propagate, trace
from opentelemetry.context import Context
from opentelemetry.propagators.textmap import Getter
from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
from opentelemetry.trace import SpanKind, Status, StatusCode
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from jobrail.kernel.ids import random_bytes
from jobrail.telemetry.http_metrics import HttpServerMetrics
from jobrail.telemetry.logging import log_context
from jobrail.telemetry.tracing import spans_sampled

log = logging.getLogger("jobrail.api.access")
_tracer = trace.get_tracer("jobrail.api")
_ids = RandomIdGenerator()

REQUEST_ID_HEADER = "X-Request-Id"
_REQUEST_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@/+=-]{0,127}")
_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


class RequestTelemetry:
    """Pure ASGI middleware; add it last so that it wraps every other one."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers: list[tuple[bytes, bytes]] = scope["headers"]
        request_id = sane_request_id(_header(headers, b"x-request-id"))
        method = scope["method"] if scope["method"] in _METHODS else "_OTHER"
        fields = _RequestFields(request_id, scope.setdefault("state", {}))
        status = 500  # what the server answers if the app raises before responding
        started = time.perf_counter()

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                message = {
                    **message,
                    "headers": [
                        *message.get("headers", ()),
                        (b"x-request-id", request_id.encode()),
                    ],
                }
            await send(message)

        parent = propagate.extract(headers, context=Context(), getter=_HEADERS)
        if not spans_sampled():
            # Nothing is recorded: the span the SDK's always-off sampler would make is only
            # its ids, made here for a fraction of the cost (see `unrecorded_span`).
            token = context.attach(trace.set_span_in_context(unrecorded_span(parent), parent))
            try:
                with log_context(fields):
                    try:
                        await self.app(scope, receive, send_with_id)
                    finally:
                        _done(scope, method, status, started)
            finally:
                context.detach(token)
            return
        with (
            _tracer.start_as_current_span(
                method,
                context=parent,
                kind=SpanKind.SERVER,
                attributes={
                    "http.request.method": method,
                    "url.scheme": scope.get("scheme", "http"),
                    "url.path": scope["path"],
                    "network.protocol.version": scope.get("http_version", "1.1"),
                    "jobrail.request_id": request_id,
                },
            ) as span,
            log_context(fields),
        ):
            try:
                await self.app(scope, receive, send_with_id)
            finally:
                if span.is_recording():
                    route = getattr(scope.get("route"), "path_format", None)
                    _finish(span, method, route, status, fields.tenant_id)
                _done(scope, method, status, started)


def _done(scope: Scope, method: str, status: int, started: float) -> None:
    """The request's series and its access line, at DEBUG (the server's own access log
    is off)."""
    seconds = time.perf_counter() - started
    route: str | None = getattr(scope.get("route"), "path_format", None)
    state = getattr(scope.get("app"), "state", None)
    metrics: HttpServerMetrics | None = getattr(state, "http_metrics", None)
    if metrics is not None:
        metrics.observe(method, route, status, seconds)
    if log.isEnabledFor(logging.DEBUG):
        log.debug(
            "%s %s %d",
            method,
            route or scope["path"],
            status,
            extra={"duration_ms": round(seconds * 1000, 2)},
        )


def unrecorded_span(parent: Context) -> trace.Span:
    """The server span where no span is recorded: what the SDK makes under its always-off
    sampler, a span of ids alone (the parent's trace id or a new one, a new span id, not
    sampled), so that trace ids still flow to the jobs and the logs."""
    upstream = trace.get_current_span(parent).get_span_context()
    trace_id = upstream.trace_id if upstream.is_valid else _ids.generate_trace_id()
    return trace.NonRecordingSpan(
        trace.SpanContext(
            trace_id,
            _ids.generate_span_id(),
            is_remote=False,
            trace_flags=trace.TraceFlags(trace.TraceFlags.DEFAULT),
            trace_state=upstream.trace_state,
        )
    )


def sane_request_id(value: str | None) -> str:
    """The caller's request id if it looks like one, else a new one."""
    if value is not None and _REQUEST_ID.fullmatch(value):
        return value
    return str(uuid.UUID(bytes=random_bytes(16), version=4))


def _finish(
    span: trace.Span, method: str, route: str | None, status: int, tenant: str | None
) -> None:
    if route is not None:
        span.update_name(f"{method} {route}")
        span.set_attribute("http.route", route)
    span.set_attribute("http.response.status_code", status)
    if tenant is not None:
        span.set_attribute("tenant.id", tenant)
    if status >= 500:
        span.set_status(Status(StatusCode.ERROR))


class _RequestFields(Mapping[str, object]):
    """The request's log fields; the tenant appears once the request is authenticated."""

    __slots__ = ("_state", "request_id")

    def __init__(self, request_id: str, state: dict[str, Any]) -> None:
        self.request_id = request_id
        self._state = state

    @property
    def tenant_id(self) -> str | None:
        tenant = getattr(self._state.get("principal"), "tenant_id", None)
        return str(tenant) if tenant is not None else None

    def _current(self) -> dict[str, object]:
        tenant = self.tenant_id
        if tenant is None:
            return {"request_id": self.request_id}
        return {"request_id": self.request_id, "tenant_id": tenant}

    def __getitem__(self, key: str) -> object:
        return self._current()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._current())

    def __len__(self) -> int:
        return len(self._current())

    def items(self) -> ItemsView[str, object]:
        return self._current().items()


def _header(headers: list[tuple[bytes, bytes]], name: bytes) -> str | None:
    for key, value in headers:
        if key == name:
            return value.decode("latin-1")
    return None


class _AsgiHeaders(Getter[list[tuple[bytes, bytes]]]):
    def get(self, carrier: list[tuple[bytes, bytes]], key: str) -> list[str] | None:
        wanted = key.lower().encode("latin-1")
        values = [value.decode("latin-1") for name, value in carrier if name == wanted]
        return values or None

    def keys(self, carrier: list[tuple[bytes, bytes]]) -> list[str]:
        return [name.decode("latin-1") for name, _ in carrier]


_HEADERS = _AsgiHeaders()
