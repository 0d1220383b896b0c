"""OpenTelemetry tracing for the API and the workers.

One trace follows a job from the HTTP request that asked for it, through the enqueue
and the outbox publish, to the worker that runs it: the enqueue span's context travels
in the message labels (W3C ``traceparent``/``tracestate``) and the worker's span takes
it as its parent (``jobrail.telemetry.propagation``).

What leaves the process is decided by ``TelemetrySettings``. With ``otlp_endpoint``
spans are batched and sent over OTLP/HTTP by a background thread (the hot path only
hands finished spans to the batch). Without it nothing is recorded or exported, but
trace ids are still made and passed on, so that API and worker logs of one job share a
``trace_id``: an always-off sampler costs an id per span and nothing more.

OpenTelemetry lets a process set its global tracer provider once, yet a process may
build its app more than once (tests, the embedded mode). So jobrail installs, once, a
provider that forwards to the SDK provider of the latest ``configure_tracing``; the one
it replaces is flushed and shut down.
"""

import atexit
import logging
import threading
from collections.abc import Sequence
from contextlib import AbstractContextManager

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.resources import SERVICE_NAME, SERVICE_VERSION, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ParentBased, TraceIdRatioBased
from opentelemetry.util import types

from jobrail.settings import TelemetrySettings
from jobrail.version import __version__

log = logging.getLogger("jobrail.telemetry")

TRACES_PATH = "/v1/traces"


def configure_tracing(settings: TelemetrySettings) -> None:
    """Make this process trace as `settings` say (the last call wins)."""
    resource = Resource.create({SERVICE_NAME: settings.service_name, SERVICE_VERSION: __version__})
    if settings.otlp_endpoint is None:
        provider = TracerProvider(resource=resource, sampler=ALWAYS_OFF, shutdown_on_exit=False)
    else:
        # Imported only when used: it brings requests and protobuf (~70 ms at start-up).
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        provider = TracerProvider(
            resource=resource,
            sampler=ParentBased(TraceIdRatioBased(settings.sample_ratio)),
            shutdown_on_exit=False,
        )
        exporter = OTLPSpanExporter(endpoint=traces_url(settings.otlp_endpoint))
        provider.add_span_processor(BatchSpanProcessor(exporter))
    use_tracer_provider(provider)


def traces_url(endpoint: str) -> str:
    """The traces URL of an OTLP/HTTP base URL (a full traces URL is kept as it is)."""
    endpoint = endpoint.rstrip("/")
    return endpoint if endpoint.endswith(TRACES_PATH) else endpoint + TRACES_PATH


def use_tracer_provider(provider: TracerProvider | None) -> None:
    """Send this process's spans to `provider` from now on (None: the no-op one). The
    provider it replaces is flushed and shut down."""
    _install_once()
    old = _FORWARDING.switch(provider)
    if old is not None:
        old.shutdown()


def process_tracer_provider() -> trace.TracerProvider:
    """The process's tracer provider, which follows `use_tracer_provider` (what the
    composition root injects into the instrumented clients)."""
    _install_once()
    return _FORWARDING


def spans_sampled() -> bool:
    """Whether this process may record any span at all. Without an exporter (the
    always-off sampler) no span is ever recorded, and a hot path may skip making one:
    it passes the trace context it was given on instead (see ``JobRoutes.run``)."""
    provider = _FORWARDING.sdk_provider
    return provider is not None and provider.sampler is not ALWAYS_OFF


def flush_tracing(timeout_ms: int = 5_000) -> bool:
    """Export the spans that have ended so far; False if that did not finish in time."""
    provider = _FORWARDING.sdk_provider
    return True if provider is None else provider.force_flush(timeout_ms)


def shutdown_tracing() -> None:
    """Flush and stop exporting (at process exit: worker processes end without atexit)."""
    use_tracer_provider(None)


class _ForwardingTracerProvider(trace.TracerProvider):
    """The global provider: hands out tracers that follow `switch`."""

    def __init__(self) -> None:
        self.target: trace.TracerProvider = trace.NoOpTracerProvider()
        self.sdk_provider: TracerProvider | None = None
        self.generation = 0
        self._lock = threading.Lock()

    def switch(self, provider: TracerProvider | None) -> TracerProvider | None:
        with self._lock:
            old, self.sdk_provider = self.sdk_provider, provider
            self.target = provider if provider is not None else trace.NoOpTracerProvider()
            self.generation += 1  # after the target: a tracer that sees it finds the new one
        return old

    def get_tracer(
        self,
        instrumenting_module_name: str,
        instrumenting_library_version: str | None = None,
        schema_url: str | None = None,
        attributes: types.Attributes = None,
    ) -> trace.Tracer:
        return _ForwardingTracer(
            self, instrumenting_module_name, instrumenting_library_version, schema_url, attributes
        )


class _ForwardingTracer(trace.Tracer):
    def __init__(
        self,
        provider: _ForwardingTracerProvider,
        name: str,
        version: str | None,
        schema_url: str | None,
        attributes: types.Attributes,
    ) -> None:
        self._provider = provider
        self._scope = (name, version, schema_url, attributes)
        self._generation = -1
        self._tracer: trace.Tracer = trace.NoOpTracer()

    def _current(self) -> trace.Tracer:
        if self._generation != self._provider.generation:
            self._generation = self._provider.generation
            self._tracer = self._provider.target.get_tracer(*self._scope)
        return self._tracer

    def start_span(
        self,
        name: str,
        context: Context | None = None,
        kind: trace.SpanKind = trace.SpanKind.INTERNAL,
        attributes: types.Attributes = None,
        links: Sequence[trace.Link] | None = None,
        start_time: int | None = None,
        record_exception: bool = True,
        set_status_on_exception: bool = True,
    ) -> trace.Span:
        return self._current().start_span(
            name,
            context,
            kind,
            attributes,
            links,
            start_time,
            record_exception,
            set_status_on_exception,
        )

    def start_as_current_span(  # type: ignore[override]
        self,
        name: str,
        context: Context | None = None,
        kind: trace.SpanKind = trace.SpanKind.INTERNAL,
        attributes: types.Attributes = None,
        links: Sequence[trace.Link] | None = None,
        start_time: int | None = None,
        record_exception: bool = True,
        set_status_on_exception: bool = True,
        end_on_exit: bool = True,
    ) -> AbstractContextManager[trace.Span]:
        return self._current().start_as_current_span(
            name,
            context,
            kind,
            attributes,
            links,
            start_time,
            record_exception,
            set_status_on_exception,
            end_on_exit,
        )


_FORWARDING = _ForwardingTracerProvider()
_installed = False


def _install_once() -> None:
    global _installed
    if _installed:
        return
    _installed = True
    trace.set_tracer_provider(_FORWARDING)
    if trace.get_tracer_provider() is not _FORWARDING:
        log.warning(
            "another OpenTelemetry tracer provider was installed first; "
            "the telemetry settings of jobrail do not apply to it"
        )
    atexit.register(shutdown_tracing)
