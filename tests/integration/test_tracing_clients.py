"""The calls a job makes, in its trace: the SQL statements, the Redis commands and the
AMQP publish and delivery of one job, and its outgoing HTTP call, whose ``traceparent``
the receiving server reads, all beneath the HTTP request that asked for the job.

The in-process API and a real ``jobrail worker`` export to an OTLP receiver on
loopback; the vendor the sync job calls is the sandbox on loopback, behind a recorder
of the ``traceparent`` headers it received."""

from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest
from starlette.types import Receive, Scope, Send

from contexts.sync.adapters.sandbox import SandboxState, create_sandbox_app
from jobrail.telemetry.tracing import flush_tracing, shutdown_tracing
from tests.support.fixtures import settings_from
from tests.support.otlp import OtlpReceiver, ReceivedSpan, otlp_receiver
from tests.support.servers import served
from tests.support.services import wait_for


class TraceparentRecorder:
    """The sandbox vendor, recording the ``traceparent`` of every request it gets."""

    def __init__(self) -> None:
        self.app = create_sandbox_app(SandboxState(max_calls=1000, max_accounts=1000))
        self.received: list[list[str]] = []  # per request, its traceparent headers

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            self.received.append([v.decode() for k, v in scope["headers"] if k == b"traceparent"])
        await self.app(scope, receive, send)


@pytest.fixture
def otlp() -> Iterator[OtlpReceiver]:
    with otlp_receiver() as receiver:
        yield receiver
    shutdown_tracing()


@pytest.fixture
async def vendor() -> AsyncIterator[tuple[TraceparentRecorder, str]]:
    recorder = TraceparentRecorder()
    async with served(recorder) as url:
        yield recorder, url


@pytest.fixture
def traced_env(
    stack_env: dict[str, str], otlp: OtlpReceiver, vendor: tuple[TraceparentRecorder, str]
) -> dict[str, str]:
    return {
        **stack_env,
        "JOBRAIL_TELEMETRY__OTLP_ENDPOINT": otlp.endpoint,
        "JOBRAIL_SYNC__VENDOR_BASE_URL": vendor[1],
        "JOBRAIL_SYNC__SANDBOX": "false",
    }


@pytest.fixture
def worker_env(traced_env: dict[str, str]) -> dict[str, str]:
    return {
        **traced_env,
        "JOBRAIL_TELEMETRY__SERVICE_NAME": "jobrail-worker",
        # The SDK's own setting: export finished spans after 100 ms, not 5 s.
        "OTEL_BSP_SCHEDULE_DELAY": "100",
    }


def _ancestors(span: ReceivedSpan, by_id: dict[str, ReceivedSpan]) -> list[ReceivedSpan]:
    chain = []
    while span.parent_span_id in by_id:
        span = by_id[span.parent_span_id]
        chain.append(span)
    return chain


async def test_the_sql_redis_amqp_and_http_calls_of_a_job_are_spans_of_the_request_trace(
    traced_env: dict[str, str],
    otlp: OtlpReceiver,
    vendor: tuple[TraceparentRecorder, str],
    monkeypatch: pytest.MonkeyPatch,
    make_api: Callable[..., Any],
    workers: Callable[..., Any],
) -> None:
    recorder, _ = vendor
    api_settings = settings_from(
        {**traced_env, "JOBRAIL_TELEMETRY__SERVICE_NAME": "jobrail-api"}, monkeypatch
    )
    await workers()
    async with make_api(api_settings) as api:
        accepted = await api.post("/sync/accounts/shop-pages-1/sync")
        assert accepted.status_code == 202, accepted.text
        job_id = accepted.json()["job_id"]
        await api.wait_status(job_id, "succeeded", timeout=30)
        assert flush_tracing()

    async def run_span() -> ReceivedSpan | None:
        spans = [
            s
            for s in otlp.spans
            if s.kind == "SPAN_KIND_CONSUMER" and s.attributes.get("job.id") == job_id
        ]
        return spans[0] if spans else None

    run = await wait_for(run_span, timeout=10, what="the worker's span of the job")

    def vendor_spans() -> list[ReceivedSpan]:
        return [
            s
            for s in otlp.trace(run.trace_id)
            if s.service == "jobrail-worker"
            and s.kind == "SPAN_KIND_CLIENT"
            and ("http.method" in s.attributes or "http.request.method" in s.attributes)
        ]

    async def vendor_called() -> list[ReceivedSpan] | None:
        return vendor_spans() or None

    await wait_for(vendor_called, timeout=10, what="the vendor call spans")
    spans = otlp.trace(run.trace_id)
    by_id = {s.span_id: s for s in spans}
    (server,) = [s for s in spans if s.name == "POST /sync/accounts/{account_id}/sync"]
    assert server.kind == "SPAN_KIND_SERVER"
    assert server.parent_span_id == ""
    # One tree: every span but the request's descends from it.
    for span in spans:
        if span is not server:
            assert server in _ancestors(span, by_id), span

    def in_worker_run(span: ReceivedSpan) -> bool:
        return span.service == "jobrail-worker" and run in _ancestors(span, by_id)

    sql = [s for s in spans if s.attributes.get("db.system") == "postgresql"]
    assert any(s.service == "jobrail-api" for s in sql), "the enqueue's INSERT"
    assert any(in_worker_run(s) for s in sql), "the job's statements"
    redis = [s for s in spans if s.attributes.get("db.system") == "redis"]
    assert any(in_worker_run(s) for s in redis), "the limits' and vendor throttle's scripts"
    # Commands go without their arguments (keys name tenants and accounts).
    assert all(set(s.attributes["db.statement"].split()[1:]) <= {"?"} for s in redis)
    (publish,) = [s for s in spans if s.name == "outbox publish"]
    assert publish.attributes["messaging.system"] == "rabbitmq"
    assert publish.attributes["messaging.operation.type"] == "send"
    assert run.attributes["messaging.system"] == "rabbitmq"
    assert run.attributes["messaging.operation.type"] == "process"
    assert run.attributes["messaging.destination.name"] == run.attributes["job.queue"]

    # The vendor heard of each call's own span: the job's trace id, the client span id.
    calls = vendor_spans()
    assert calls
    assert all(in_worker_run(s) for s in calls)
    assert len(recorder.received) == len(calls)
    assert all(len(headers) == 1 for headers in recorder.received)
    heard = {tuple(headers[0].split("-")[1:3]) for headers in recorder.received}
    assert heard == {(run.trace_id, s.span_id) for s in calls}
