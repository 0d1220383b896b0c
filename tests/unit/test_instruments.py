"""jobrail instruments the clients it makes, and only those: a host application's own
engine, Redis and httpx clients in the same process are left as they were."""

import httpx
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from redis.asyncio import Redis
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

from jobrail.telemetry.instruments import Instruments


def _recording() -> tuple[TracerProvider, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


async def test_the_engine_jobrail_makes_is_traced_and_a_host_engine_is_not() -> None:
    provider, exporter = _recording()
    ours = create_async_engine("sqlite+aiosqlite://")
    Instruments(provider, exported=True).engine(ours)
    host = create_async_engine("sqlite+aiosqlite://")

    for engine in (ours, host):
        async with engine.connect() as conn:
            await conn.execute(text("SELECT 1"))
        await engine.dispose()

    # Two statements ran, one on each engine: the host's made no span.
    assert [span.name for span in exporter.get_finished_spans()] == ["SELECT"]


async def test_without_an_exporter_sql_and_redis_are_not_instrumented() -> None:
    provider, exporter = _recording()
    instruments = Instruments(provider, exported=False)
    engine = create_async_engine("sqlite+aiosqlite://")
    redis = Redis()
    instruments.engine(engine)
    instruments.redis(redis)

    async with engine.connect() as conn:
        await conn.execute(text("SELECT 1"))
    await engine.dispose()

    assert exporter.get_finished_spans() == ()
    assert not getattr(redis, "_is_instrumented_by_opentelemetry", False)
    await redis.aclose()


async def test_an_http_client_jobrail_makes_sends_traceparent_and_a_host_client_does_not() -> None:
    provider, exporter = _recording()
    heard: list[str | None] = []

    def vendor(request: httpx.Request) -> httpx.Response:
        heard.append(request.headers.get("traceparent"))
        return httpx.Response(204)

    ours = httpx.AsyncClient(transport=httpx.MockTransport(vendor))
    Instruments(provider, exported=False).http_client(ours)
    host = httpx.AsyncClient(transport=httpx.MockTransport(vendor))
    async with ours, host:
        await ours.get("http://127.0.0.1/ours")
        await host.get("http://127.0.0.1/host")

    (span,) = exporter.get_finished_spans()
    context = span.get_span_context()
    assert heard[0] is not None
    assert heard[0].split("-")[1:3] == [f"{context.trace_id:032x}", f"{context.span_id:016x}"]
    assert heard[1] is None
