"""What operators watch (docs: Watch it): Prometheus metrics, OpenTelemetry tracing, and
the sign-in to the ops page."""

from typing import Annotated

from pydantic import BaseModel, Field, SecretStr, field_validator

from jobrail.settings.values import PositiveFloat


class MetricsSettings(BaseModel):
    """Prometheus metrics (see jobrail.telemetry.metrics and jobrail.runtime.metrics_endpoint)."""

    api_enabled: bool = Field(default=True, description="Serve GET /metrics on the API.")
    token: SecretStr | None = Field(
        default=None,
        description="When set, scrapes must send Authorization: Bearer <token> (API and workers).",
    )
    worker_port: Annotated[int, Field(ge=0, le=65535)] = Field(
        default=0,
        description="Worker process i serves its metrics on worker_port + i; 0: none.",
    )
    worker_host: str = "127.0.0.1"
    lookup_ttl_s: PositiveFloat = Field(
        default=2.0,
        description="Queue depths and outbox lag are looked up at most this often.",
    )
    lookup_timeout_s: PositiveFloat = 2.0


class OpsSettings(BaseModel):
    """The ops page's sign-in (see jobrail.ops.console)."""

    session_ttl_s: PositiveFloat = Field(
        default=8 * 3600.0,
        description="A session made by signing in to /ops ends this long after it began, "
        "whatever the browser keeps.",
    )
    overview_cache_s: Annotated[float, Field(ge=0, le=60, allow_inf_nan=False)] = Field(
        default=3.0,
        description="The overview's reads are kept this long in each API process, so that "
        "every tab refreshing it costs one read per period; 0 reads for every request.",
    )


class TelemetrySettings(BaseModel):
    """Tracing (OpenTelemetry). Without an endpoint nothing is recorded or exported; trace
    ids are still made and passed on, so that API and worker logs share a ``trace_id``."""

    otlp_endpoint: str | None = Field(
        default=None,
        description="Base URL of an OTLP/HTTP collector (http://host:4318); spans go to "
        "<url>/v1/traces. Unset: no spans are exported.",
    )
    service_name: str = Field(default="jobrail", min_length=1)
    sample_ratio: Annotated[float, Field(ge=0, le=1)] = Field(
        default=1.0,
        description="Share of new traces that are recorded; a trace started upstream "
        "keeps its parent's decision.",
    )

    @field_validator("otlp_endpoint")
    @classmethod
    def _http_url(cls, url: str | None) -> str | None:
        if not url:
            return None
        if not url.startswith(("http://", "https://")):
            raise ValueError("use an http:// or https:// URL")
        return url
