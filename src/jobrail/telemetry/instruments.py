"""Spans of the clients jobrail makes: the SQLAlchemy engine, the limits' Redis client
and the httpx clients of webhooks and of the contexts.

OpenTelemetry's instrumentations are applied to those instances only, through each
library's instance-level API, never by patching a module: a host application that
installs jobrail finds its own engines and clients untouched. (SQLAlchemy's
``instrument(engine=...)`` would also patch ``create_engine`` for the whole process, so
its per-engine ``EngineTracer`` is used alone.) SQLAlchemy's rather than asyncpg's
instrumentation: it sees the statements of the engine jobrail creates, whatever the
driver (asyncpg, aiosqlite), and asyncpg's has no instance-level API.

Statement and command spans are made only where spans are exported
(``telemetry.otlp_endpoint``): otherwise each would cost a no-op span per statement for
nothing. Outgoing HTTP is instrumented always, as it carries ``traceparent``: a vendor's
or a webhook receiver's logs then share the job's trace id, exported or not.

Their metrics are not used (the series are Prometheus's, ``jobrail.telemetry.metrics``):
the instrumentations get a no-op meter provider.
"""

import httpx
from opentelemetry.instrumentation.httpx import HTTPXClientInstrumentor
from opentelemetry.instrumentation.redis import RedisInstrumentor
from opentelemetry.instrumentation.sqlalchemy.engine import EngineTracer
from opentelemetry.instrumentation.sqlalchemy.version import __version__ as sqla_version
from opentelemetry.metrics import MeterProvider, NoOpMeterProvider
from opentelemetry.trace import TracerProvider
from redis.asyncio import Redis, RedisCluster
from sqlalchemy.ext.asyncio import AsyncEngine

_SQLA_SCOPE = "opentelemetry.instrumentation.sqlalchemy"


class Instruments:
    """Instruments the clients the composition root makes (one per process, injected)."""

    def __init__(self, tracer_provider: TracerProvider, *, exported: bool) -> None:
        self.tracer_provider = tracer_provider
        self.meter_provider: MeterProvider = NoOpMeterProvider()
        self.exported = exported

    def engine(self, engine: AsyncEngine) -> None:
        """A span per statement of `engine` (its text, never its parameters)."""
        if not self.exported:
            return
        tracer = self.tracer_provider.get_tracer(_SQLA_SCOPE, sqla_version)
        usage = self.meter_provider.get_meter(_SQLA_SCOPE).create_up_down_counter(
            "db.client.connections.usage"
        )
        EngineTracer(tracer, engine.sync_engine, usage)  # type: ignore[no-untyped-call]

    def redis(self, client: "Redis | RedisCluster") -> None:
        """A span per command or pipeline of `client`."""
        if not self.exported:
            return
        RedisInstrumentor.instrument_client(client, tracer_provider=self.tracer_provider)

    def http_client(self, client: httpx.AsyncClient) -> None:
        """A client span per request of `client`, which sends ``traceparent``."""
        HTTPXClientInstrumentor.instrument_client(
            client, tracer_provider=self.tracer_provider, meter_provider=self.meter_provider
        )
