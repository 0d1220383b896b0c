"""One trace from the HTTP request to the worker, sent to a real OTLP/HTTP receiver.

The in-process API and a real ``jobrail worker`` process export to a receiver on
loopback; the test reads back what they sent, as a collector would see it.
"""

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from jobrail.telemetry.tracing import flush_tracing, shutdown_tracing, use_tracer_provider
from tests.support.fixtures import settings_from
from tests.support.otlp import OtlpReceiver, ReceivedSpan, otlp_receiver
from tests.support.services import wait_for


@pytest.fixture
def otlp() -> Iterator[OtlpReceiver]:
    with otlp_receiver() as receiver:
        yield receiver
    shutdown_tracing()  # the in-process API's exporter must not outlive its receiver


@pytest.fixture
def worker_env(stack_env: dict[str, str], otlp: OtlpReceiver) -> dict[str, str]:
    return {
        **stack_env,
        "JOBRAIL_TELEMETRY__OTLP_ENDPOINT": otlp.endpoint,
        "JOBRAIL_TELEMETRY__SERVICE_NAME": "jobrail-worker",
        "JOBRAIL_LOG_LEVEL": "DEBUG",
        # The SDK's own setting: export finished spans after 100 ms, not 5 s.
        "OTEL_BSP_SCHEDULE_DELAY": "100",
    }


async def test_one_trace_follows_a_job_from_the_http_request_through_rabbitmq_to_the_worker(
    stack_env: dict[str, str],
    otlp: OtlpReceiver,
    monkeypatch: pytest.MonkeyPatch,
    make_api: Callable[..., Any],
    workers: Callable[..., Any],
) -> None:
    api_settings = settings_from(
        {
            **stack_env,
            "JOBRAIL_TELEMETRY__OTLP_ENDPOINT": otlp.endpoint,
            "JOBRAIL_TELEMETRY__SERVICE_NAME": "jobrail-api",
        },
        monkeypatch,
    )
    worker = await workers()
    async with make_api(api_settings) as api:
        response = await api.post(
            "/demo/echo", json={"message": "traced"}, headers={"X-Request-Id": "req-42"}
        )
        assert response.status_code == 202, response.text
        assert response.headers["X-Request-Id"] == "req-42"
        job_id = response.json()["job_id"]
        await api.wait_status(job_id, "succeeded")
        assert flush_tracing()
        api_key = api.headers["Authorization"].removeprefix("Bearer ")

    async def worker_span() -> ReceivedSpan | None:
        spans = [s for s in otlp.named("run demo.echo") if s.attributes.get("job.id") == job_id]
        return spans[0] if spans else None

    run = await wait_for(worker_span, timeout=10, what="the worker's span of the job")
    spans = otlp.trace(run.trace_id)

    (server,) = [s for s in spans if s.kind == "SPAN_KIND_SERVER"]
    assert server.name == "POST /demo/echo"
    assert server.service == "jobrail-api"
    assert server.attributes["http.route"] == "/demo/echo"
    assert server.attributes["http.response.status_code"] == 202
    assert server.attributes["jobrail.request_id"] == "req-42"
    assert server.attributes["tenant.id"] == "default"
    (enqueue,) = [s for s in spans if s.name == "enqueue demo.echo"]
    assert enqueue.kind == "SPAN_KIND_PRODUCER"
    assert enqueue.attributes["job.id"] == job_id
    (publish,) = [s for s in spans if s.name == "outbox publish" and s.service == "jobrail-api"]
    assert publish.parent_span_id == enqueue.span_id
    assert run.service == "jobrail-worker"
    assert run.kind == "SPAN_KIND_CONSUMER"
    assert run.parent_span_id == enqueue.span_id
    assert run.attributes["job.type"] == "demo.echo"
    assert run.attributes["tenant.id"] == "default"
    # Keys and payloads stay out of traces.
    for span in spans:
        for value in span.attributes.values():
            assert api_key not in str(value)
            assert "traced" not in str(value)

    lines = [r for r in worker.log_records() if r.get("job_id") == job_id]
    assert lines, worker.output()[-3000:]
    for line in lines:
        assert line["trace_id"] == run.trace_id
        assert line["task_id"] == run.attributes["messaging.message.id"]
        assert line["tenant_id"] == "default"


async def test_with_tracing_off_no_sql_spans_are_made(api: Any) -> None:
    """Without an OTLP endpoint the composition root leaves jobrail's engine (and Redis
    client) uninstrumented: a recording provider installed afterwards sees the
    request's own spans but not one database span (``db.system``)."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    use_tracer_provider(provider)
    try:
        await api.echo(message="untraced statements")
        spans = exporter.get_finished_spans()
    finally:
        shutdown_tracing()

    names = {span.name for span in spans}
    assert "POST /demo/echo" in names, names  # the provider records the request
    assert not [s for s in spans if (s.attributes or {}).get("db.system")], names
