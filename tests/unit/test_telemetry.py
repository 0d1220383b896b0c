"""Traces and log context without any service: spans are kept in memory."""

import io
import json
import logging
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from fastapi import Depends, FastAPI, Request
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from jobrail.demo.jobs import echo
from jobrail.jobs.enqueue import EnqueueJob, EnqueueJobCommand
from jobrail.jobs.registry import JobRegistry
from jobrail.kernel.ids import TenantId
from jobrail.limits.counters import LimitCounters
from jobrail.limits.memory import MemoryLimits
from jobrail.limits.model import JobLimits, Lock
from jobrail.outbox.committing import intake_units
from jobrail.settings import TelemetrySettings
from jobrail.telemetry.http import RequestTelemetry
from jobrail.telemetry.logging import JsonFormatter, LogContextFilter, log_context
from jobrail.telemetry.propagation import context_from_labels, current_trace_context
from jobrail.telemetry.tracing import configure_tracing, traces_url, use_tracer_provider
from jobrail.tenants.domain import Principal
from jobrail.worker.gate import GateConfig, JobGate, Pass
from jobrail.worker.gating import Deferred
from tests.fakes import FakeDispatcher, FakeJobIntake, FixedClock
from tests.support.wire import parse_job_message

tracer = trace.get_tracer("tests")


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    use_tracer_provider(provider)
    yield exporter
    use_tracer_provider(None)


@pytest.fixture
def log_lines() -> Iterator[io.StringIO]:
    """JSON lines of the `tests.telemetry` logger, formatted as the processes do."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    handler.addFilter(LogContextFilter())
    logger = logging.getLogger("tests.telemetry")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    yield stream
    logger.removeHandler(handler)


def lines(stream: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def named(exporter: InMemorySpanExporter, name: str) -> ReadableSpan:
    (span,) = [s for s in exporter.get_finished_spans() if s.name == name]
    return span


async def enqueue_echo(**cmd: Any) -> FakeDispatcher:
    dispatcher = FakeDispatcher()
    registry = JobRegistry([echo], queues=["jobs.default"], default_timeout_s=10)
    enqueue = EnqueueJob(intake_units(FakeJobIntake({}), dispatcher), registry, FixedClock(), 5)
    await enqueue(
        EnqueueJobCommand(
            tenant_id=TenantId("acme"), type="demo.echo", payload={"message": "hi"}, **cmd
        )
    )
    return dispatcher


async def test_a_jobs_trace_context_survives_the_trip_through_its_message_labels(
    spans: InMemorySpanExporter,
) -> None:
    with tracer.start_as_current_span("POST /demo/echo") as request:
        dispatcher = await enqueue_echo()

    message = parse_job_message(dispatcher.dispatched[0].body)
    parent = trace.get_current_span(context_from_labels(message.labels)).get_span_context()
    enqueue = named(spans, "enqueue demo.echo")
    assert parent.is_remote
    assert parent.trace_id == request.get_span_context().trace_id
    # The worker's span is the enqueue's child.
    assert enqueue.context is not None
    assert parent.span_id == enqueue.context.span_id
    assert message.labels["tenant_id"] == "acme"  # the platform's labels are still there


async def test_a_trace_context_given_with_the_command_is_the_one_the_job_carries(
    spans: InMemorySpanExporter,
) -> None:
    upstream = {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}

    dispatcher = await enqueue_echo(trace_context=upstream)

    labels = parse_job_message(dispatcher.dispatched[0].body).labels
    assert labels["traceparent"] == upstream["traceparent"]


@pytest.mark.parametrize(
    "labels",
    [
        {"queue_name": "jobs.default", "tenant_id": "acme"},
        {"traceparent": 42, "tracestate": ["x"]},
        {"traceparent": "00-not-a-trace-01"},
    ],
)
def test_labels_without_a_usable_trace_context_start_a_new_trace(labels: dict[str, Any]) -> None:
    parent = trace.get_current_span(context_from_labels(labels)).get_span_context()

    assert not parent.is_valid


def test_without_an_endpoint_nothing_is_recorded_but_trace_ids_still_flow() -> None:
    configure_tracing(TelemetrySettings())
    try:
        with tracer.start_as_current_span("enqueue") as enqueue:
            labels = current_trace_context()
        with tracer.start_as_current_span("run", context=context_from_labels(labels)) as run:
            pass
    finally:
        use_tracer_provider(None)

    assert not enqueue.is_recording()
    flags = int(labels["traceparent"].rsplit("-", 1)[1], 16)
    assert not flags & trace.TraceFlags.SAMPLED  # sampled out, all the way down
    assert run.get_span_context().trace_id == enqueue.get_span_context().trace_id


def test_an_otlp_base_url_sends_traces_to_its_traces_path() -> None:
    assert traces_url("http://collector:4318") == "http://collector:4318/v1/traces"
    assert traces_url("http://collector:4318/v1/traces") == "http://collector:4318/v1/traces"


def test_log_lines_inside_a_job_carry_its_ids_and_trace(
    spans: InMemorySpanExporter, log_lines: io.StringIO
) -> None:
    log = logging.getLogger("tests.telemetry")
    with (
        tracer.start_as_current_span("run demo.echo") as run,
        log_context({"job_id": "j1", "task_id": "t1", "tenant_id": "acme"}),
    ):
        log.info("working")
    log.info("after")

    inside, after = lines(log_lines)
    assert inside["job_id"] == "j1"
    assert inside["task_id"] == "t1"
    assert inside["tenant_id"] == "acme"
    assert inside["trace_id"] == format(run.get_span_context().trace_id, "032x")
    assert "job_id" not in after
    assert "trace_id" not in after


def api_app() -> FastAPI:
    app = FastAPI(telemetry={"tracing": False})
    log = logging.getLogger("tests.telemetry")

    async def signed_in(request: Request) -> None:  # what jobrail.http.auth leaves behind
        request.state.principal = Principal(TenantId("acme"), admin=False, key_id=uuid.uuid4())

    @app.get("/things/{thing_id}", dependencies=[Depends(signed_in)])
    async def thing(thing_id: int) -> dict[str, int]:
        log.info("looking at a thing")
        return {"id": thing_id}

    app.add_middleware(RequestTelemetry)
    return app


def client() -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=api_app()), base_url="http://api")


async def test_every_log_line_of_a_request_carries_its_request_id_tenant_and_trace(
    spans: InMemorySpanExporter, log_lines: io.StringIO
) -> None:
    async with client() as api:
        response = await api.get("/things/7")

    (line,) = lines(log_lines)
    server = named(spans, "GET /things/{thing_id}")
    assert server.context is not None
    assert line["request_id"] == response.headers["X-Request-Id"]
    assert line["tenant_id"] == "acme"
    assert line["trace_id"] == format(server.context.trace_id, "032x")


@pytest.mark.parametrize(
    ("sent", "kept"),
    [
        ("req-42", True),
        ("01a22a78-67c5-73ad-b150-c8d9b2eeb7c6", True),
        ("has spaces", False),
        ("x" * 129, False),
        ("", False),
        ('"><script>', False),
    ],
)
async def test_a_sane_incoming_request_id_is_kept_and_any_other_replaced(
    sent: str, kept: bool
) -> None:
    async with client() as api:
        response = await api.get("/things/7", headers={"X-Request-Id": sent})

    returned = response.headers["X-Request-Id"]
    assert (returned == sent) is kept
    assert returned


async def test_a_request_span_names_the_route_and_records_no_key_or_query_string(
    spans: InMemorySpanExporter,
) -> None:
    async with client() as api:
        response = await api.get(
            "/things/7?key=account:secret-9", headers={"Authorization": "Bearer jr_topsecret"}
        )

    server = named(spans, "GET /things/{thing_id}")
    assert server.kind is trace.SpanKind.SERVER
    assert server.attributes is not None
    assert server.attributes["http.route"] == "/things/{thing_id}"
    assert server.attributes["http.response.status_code"] == response.status_code == 200
    assert server.attributes["url.path"] == "/things/7"
    recorded = " ".join(f"{k}={v}" for k, v in server.attributes.items())
    assert "secret" not in recorded
    assert "key=" not in recorded


async def test_an_incoming_traceparent_is_continued(spans: InMemorySpanExporter) -> None:
    traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    async with client() as api:
        await api.get("/things/7", headers={"traceparent": traceparent})

    server = named(spans, "GET /things/{thing_id}")
    assert server.context is not None
    assert format(server.context.trace_id, "032x") == "0af7651916cd43dd8448eb211c80319c"
    assert server.parent is not None
    assert format(server.parent.span_id, "016x") == "b7ad6b7169203331"


def unrecorded_app() -> FastAPI:
    """A route that reports the trace context a job it enqueued would carry."""
    app = FastAPI(telemetry={"tracing": False})
    log = logging.getLogger("tests.telemetry")

    @app.get("/context")
    async def context() -> dict[str, str]:
        log.info("enqueueing")
        return current_trace_context()

    app.add_middleware(RequestTelemetry)
    return app


@pytest.mark.parametrize(
    "upstream", [None, "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"]
)
async def test_without_an_endpoint_a_request_still_passes_a_trace_id_to_its_jobs_and_logs(
    upstream: str | None, log_lines: io.StringIO
) -> None:
    configure_tracing(TelemetrySettings())  # no endpoint: nothing is recorded
    try:
        transport = httpx.ASGITransport(app=unrecorded_app())
        async with httpx.AsyncClient(transport=transport, base_url="http://api") as api:
            headers = {"traceparent": upstream} if upstream else {}
            carried = (await api.get("/context", headers=headers)).json()
            second = (await api.get("/context")).json()
    finally:
        use_tracer_provider(None)

    version, trace_id, span_id, flags = carried["traceparent"].split("-")
    assert version == "00"
    assert int(trace_id, 16) != 0
    assert int(span_id, 16) != 0
    assert not int(flags, 16) & trace.TraceFlags.SAMPLED  # sampled out, as the SDK would
    if upstream is not None:
        assert trace_id == "0af7651916cd43dd8448eb211c80319c"  # the caller's trace goes on
        assert span_id != "b7ad6b7169203331"  # under a span of this server's
    assert second["traceparent"].split("-")[1] != trace_id  # each request its own trace
    line = lines(log_lines)[0]
    assert line["trace_id"] == trace_id


async def test_a_limit_wait_is_a_span_with_its_outcome_and_reason(
    spans: InMemorySpanExporter,
) -> None:
    gate = JobGate(MemoryLimits(), LimitCounters(), GateConfig(jitter=0.0))
    limits = JobLimits(lock=Lock(key="account:{account_id}", ttl_s=30))
    keys = limits.keys({"account_id": "a1"})

    with trace.get_tracer("test").start_as_current_span("run test.job"):  # the job's span
        first = await gate.enter(limits, keys)
        second = await gate.enter(limits, keys, deferrals=2)

    assert isinstance(first, Pass)
    assert isinstance(second, Deferred)
    admitted, deferred = [
        s.attributes or {} for s in spans.get_finished_spans() if s.name == "limits admit"
    ]
    assert admitted["limits.outcome"] == "admitted"
    assert deferred["limits.outcome"] == "deferred"
    assert deferred["limits.reason"] == second.reason
    assert deferred["limits.delay_s"] == second.delay.total_seconds()
    assert deferred["job.deferrals"] == 2
    await first.release()


async def test_a_limit_wait_outside_a_sampled_trace_makes_no_span(
    spans: InMemorySpanExporter,
) -> None:
    gate = JobGate(MemoryLimits(), LimitCounters(), GateConfig(jitter=0.0))
    limits = JobLimits(lock=Lock(key="account:{account_id}", ttl_s=30))

    admitted = await gate.enter(limits, limits.keys({"account_id": "a1"}))

    assert isinstance(admitted, Pass)
    assert spans.get_finished_spans() == ()
    await admitted.release()


@pytest.mark.parametrize("exported", [False, True])
async def test_every_request_has_its_access_line_at_debug_with_or_without_an_exporter(
    exported: bool, spans: InMemorySpanExporter, caplog: pytest.LogCaptureFixture
) -> None:
    if not exported:
        configure_tracing(TelemetrySettings())  # no endpoint: nothing is recorded
    try:
        transport = httpx.ASGITransport(app=unrecorded_app())
        with caplog.at_level(logging.DEBUG, logger="jobrail.api.access"):
            async with httpx.AsyncClient(transport=transport, base_url="http://api") as api:
                await api.get("/context")
    finally:
        if not exported:
            use_tracer_provider(None)

    lines = [r.getMessage() for r in caplog.records if r.name == "jobrail.api.access"]
    assert lines == ["GET /context 200"]


@pytest.mark.parametrize("level", ["DEBUG", "INFO"])
def test_no_http_client_logs_the_urls_it_calls(level: str) -> None:
    # httpx logs every request's whole URL at INFO: a webhook's may be its secret (a
    # Slack-style path), a vendor's may carry a token in its query.
    import logging

    from jobrail.telemetry.logging import configure_logging

    root = logging.getLogger()
    kept = (root.handlers[:], root.level)
    names = ("httpx", "aio_pika", "aiormq", "uvicorn.access", "taskiq.receiver.receiver")
    levels = {name: logging.getLogger(name).level for name in names}
    try:
        configure_logging(level)

        assert not logging.getLogger("httpx").isEnabledFor(logging.INFO)
        assert logging.getLogger("httpx").isEnabledFor(logging.WARNING)
    finally:
        root.handlers[:], root.level = kept
        for name, was in levels.items():
            logging.getLogger(name).setLevel(was)
