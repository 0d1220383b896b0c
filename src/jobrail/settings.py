"""Settings, split by concern. Every value can come from the environment.

Variables are prefixed with ``JOBRAIL_`` and nested with ``__``:
``JOBRAIL_DATABASE__URL``, ``JOBRAIL_RETRY__MAX_ATTEMPTS``. A ``.env`` file in the
working directory is read too. A bad value stops the process at start-up with a
message that names the variable (see ``load_settings``).
"""

import re
from typing import Annotated, Literal, Self
from urllib.parse import urlsplit

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict
from pydantic_settings import SettingsError as PydanticSettingsError

ENV_PREFIX = "JOBRAIL_"
ENV_NESTED_DELIMITER = "__"

# Upper bounds, so that a value is refused at start-up rather than overflowing where it
# is used (a timedelta, a Postgres integer column): `inf` or 1e300 seconds of ops session,
# 1e23 attempts, were 500s and tracebacks at run time.
MAX_SECONDS = 1e9  # about 31 years
MAX_COUNT = 2**31 - 1  # Postgres's integer
MAX_DAYS = 36_500  # a century

PositiveFloat = Annotated[float, Field(gt=0, le=MAX_SECONDS, allow_inf_nan=False)]
PositiveInt = Annotated[int, Field(gt=0, le=MAX_COUNT)]
Days = Annotated[int, Field(gt=0, le=MAX_DAYS)]


def _comma_list(value: object) -> object:
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            import json

            return json.loads(text)
        return [item.strip() for item in text.split(",") if item.strip()]
    return value


def _check_address(url: str, *, database: bool = False) -> None:
    """A URL's host and port must parse as its client will parse them, or the client
    fails later with a traceback (a port of 99999 is an OverflowError from the socket).
    A database URL is read by SQLAlchemy, which takes a password up to its last '@' (a
    '/' or '#' in it works unencoded); RabbitMQ's and Redis's clients parse as urlsplit
    does. The message never quotes the URL, which holds the password."""
    try:
        if database:
            from sqlalchemy.engine import make_url

            port = make_url(url).port
        else:
            port = urlsplit(url).port
    except ValueError:
        raise ValueError(
            "its host or port does not parse: the port is a number from 1 to 65535, an "
            "IPv6 address is in [brackets], and a '/', '@' or ':' in the user or password "
            "is percent-encoded"
        ) from None
    if port is not None and not 1 <= port <= 65535:
        raise ValueError(f"its port is {port}: use a port from 1 to 65535")


class DatabaseSettings(BaseModel):
    # hide_input_in_errors: a refused URL is not repeated in the error (it holds the
    # password), also for a host app that builds these settings itself.
    model_config = ConfigDict(
        validate_by_name=True, validate_by_alias=True, hide_input_in_errors=True
    )

    url: SecretStr = SecretStr("sqlite+aiosqlite:///./var/jobrail.db")
    pool_size: PositiveInt = 10
    max_overflow: Annotated[int, Field(ge=0, le=MAX_COUNT)] = 10
    pool_timeout_s: PositiveFloat = 10.0
    connect_timeout_s: PositiveFloat = 5.0
    echo: bool = False
    # `schema` itself would shadow BaseModel.schema(): the setting keeps that name as its alias.
    schema_: str | None = Field(
        default=None,
        alias="schema",
        description="Postgres only: the schema of the platform's tables and of "
        "jobrail_alembic_version (created by `jobrail migrate`), so that they cannot clash "
        "with a host's own tables. Unset: the database's default schema.",
    )

    @field_validator("url")
    @classmethod
    def _supported_driver(cls, url: SecretStr) -> SecretStr:
        scheme = url.get_secret_value().split("://", 1)[0]
        if scheme not in {"postgresql+asyncpg", "sqlite+aiosqlite"}:
            raise ValueError(
                "use a postgresql+asyncpg:// or sqlite+aiosqlite:// URL "
                f"(got a {scheme or 'malformed'}:// URL)"
            )
        _check_address(url.get_secret_value(), database=True)
        return url

    @field_validator("schema_")
    @classmethod
    def _plain_schema_name(cls, schema: str | None, info: ValidationInfo) -> str | None:
        if schema is None:
            return None
        url = info.data.get("url")
        if url is not None and url.get_secret_value().startswith("sqlite"):
            raise ValueError("SQLite has no schemas: unset it, or use a postgresql+asyncpg:// URL")
        # A name that reads the same quoted or not, so that SQL and psql agree on it.
        if not re.fullmatch(r"[a-z_][a-z0-9_]{0,62}", schema):
            raise ValueError(
                "use a plain SQL name: lower-case letters, digits and underscores, not "
                f"starting with a digit, at most 63 characters (got {schema!r})"
            )
        if schema.startswith("pg_"):
            raise ValueError("names starting with pg_ are Postgres's own schemas")
        return schema

    @property
    def is_sqlite(self) -> bool:
        return self.url.get_secret_value().startswith("sqlite")


class RabbitSettings(BaseModel):
    model_config = ConfigDict(hide_input_in_errors=True)  # the URL holds the password

    url: SecretStr = SecretStr("amqp://guest:guest@127.0.0.1:5672/")
    prefix: str = Field(
        default="",
        pattern=r"^[A-Za-z0-9_.-]*$",
        description="Prepended to every exchange and queue name (isolates test runs).",
    )
    exchange: str = "jobrail"
    queues: Annotated[list[str], NoDecode] = ["jobs.default", "jobs.high", "jobs.io", "jobs.heavy"]
    default_queue: str = "jobs.default"
    dead_letter_queue: str = "jobs.dlq"
    delay_tiers_ms: Annotated[list[PositiveInt], NoDecode] = [
        25,
        100,
        250,
        1_000,
        5_000,
        30_000,
        120_000,
        600_000,
        3_600_000,
    ]
    prefetch: PositiveInt = 128
    """Unacknowledged deliveries a worker process holds: as many as it runs at once
    (``worker.max_async_tasks``), so that none waits in the process for a slot while
    another worker is idle, and enough for the worker's batches (``jobrail.kernel.batching``):
    with 32 its batches were smaller and it ran far fewer jobs per second (figures in
    bench/README.md)."""
    connect_timeout_s: PositiveFloat = 5.0
    reconnect_interval_s: PositiveFloat = 1.0
    """How long a lost connection waits between reconnection attempts (aio-pika's robust
    connection; its own default is 5 s). After RabbitMQ restarts, the relay, the
    consumers and the API's fast path are back within about this long; each failed
    attempt is one connect and no log record above DEBUG (jobrail.transport.reconnects)."""
    publish_timeout_s: PositiveFloat = 5.0
    quorum_queues: bool = True

    _split_queues = field_validator("queues", "delay_tiers_ms", mode="before")(_comma_list)

    @field_validator("url")
    @classmethod
    def _amqp_url(cls, url: SecretStr) -> SecretStr:
        if not url.get_secret_value().startswith(("amqp://", "amqps://")):
            raise ValueError("use an amqp:// or amqps:// URL")
        _check_address(url.get_secret_value())
        return url

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        if not self.queues:
            raise ValueError("queues: at least one work queue is needed")
        if self.default_queue not in self.queues:
            raise ValueError(f"default_queue {self.default_queue!r} is not one of queues")
        if self.dead_letter_queue in self.queues:
            raise ValueError("dead_letter_queue must not also be a work queue")
        if not self.delay_tiers_ms:
            raise ValueError("delay_tiers_ms: at least one delay tier is needed")
        self.delay_tiers_ms = sorted(set(self.delay_tiers_ms))
        return self

    def name(self, name: str) -> str:
        return f"{self.prefix}{name}"


class RedisSettings(BaseModel):
    model_config = ConfigDict(hide_input_in_errors=True)  # the URL holds the password

    url: SecretStr = SecretStr("redis://127.0.0.1:6379/0")
    cluster: bool = Field(
        default=False,
        description="The URL is one node of a Redis Cluster (the client finds the others "
        "from it); every job type's limit keys must then share a slot (checked at start-up).",
    )
    key_prefix: str = "jobrail:"
    socket_timeout_s: PositiveFloat = 2.0

    @field_validator("url")
    @classmethod
    def _redis_url(cls, url: SecretStr) -> SecretStr:
        if not url.get_secret_value().startswith(("redis://", "rediss://", "unix://")):
            raise ValueError("use a redis://, rediss:// or unix:// URL")
        _check_address(url.get_secret_value())
        return url

    @field_validator("key_prefix")
    @classmethod
    def _no_hash_tag(cls, prefix: str) -> str:
        # The backend puts a hash tag in every key (see jobrail.limits.model.hash_tagged);
        # a brace in the prefix would be the one Redis Cluster reads instead.
        if "{" in prefix or "}" in prefix:
            raise ValueError("must not contain '{' or '}' (jobrail adds the hash tags)")
        return prefix

    @model_validator(mode="after")
    def _cluster_url(self) -> Self:
        if not self.cluster:
            return self
        url = urlsplit(self.url.get_secret_value())
        if url.scheme == "unix":
            raise ValueError("url: a Redis Cluster is reached over TCP, not a unix:// socket")
        if url.path.strip("/") not in ("", "0") or "db=" in url.query:
            raise ValueError("url: a Redis Cluster has only database 0")
        return self


class RetrySettings(BaseModel):
    """Backoff for transient failures: ``min(cap, base * 2**attempt) * random()``."""

    base_s: PositiveFloat = 1.0
    cap_s: PositiveFloat = 300.0
    max_attempts: PositiveInt = 5
    max_attempts_unknown: PositiveInt = Field(
        default=3, description="Attempts for errors that are neither transient nor permanent."
    )
    jitter: Literal["full", "none"] = "full"


class JobsSettings(BaseModel):
    default_timeout_s: PositiveFloat = 60.0
    timeouts_s: dict[str, PositiveFloat] = Field(
        default_factory=dict, description="Per job type timeout overrides, by job type name."
    )
    lease_grace_s: PositiveFloat = Field(
        default=10.0,
        description="A job whose timeout + this is shorter than lease_s claims that much, "
        "unrenewed: how long past its timeout it stays claimed if its worker dies.",
    )
    lease_s: PositiveFloat = Field(
        default=6.0,
        description="Every claim lasts this long (or timeout + grace if shorter), renewed "
        "every third of it while the job runs: a worker that dies mid-job leaves its jobs "
        "to be taken over about this long after its death, whatever the backlog. Jobs "
        "shorter than a third of it never renew.",
    )
    store_retry_max_s: PositiveFloat = Field(
        default=5.0, description="Cap of the backoff while the database is unreachable."
    )
    max_result_bytes: PositiveInt = Field(
        default=64 * 1024,
        description="A job whose handler returns a larger result (UTF-8 JSON) fails, "
        "permanently, saying so: results are small JSON, not blobs.",
    )
    progress_interval_ms: PositiveInt = Field(
        default=250,
        description="A running job writes its progress reports (ctx.progress) at most "
        "once per this: the first at once, then the latest at the end of each interval, "
        "and the last before its outcome.",
    )


class OutboxSettings(BaseModel):
    relay_interval_s: PositiveFloat = 1.0
    relay_batch: PositiveInt = 200
    relay_min_age_s: Annotated[float, Field(ge=0, le=MAX_SECONDS, allow_inf_nan=False)] = Field(
        default=2.0,
        description="Rows younger than this are left to the publishing request's fast path.",
    )
    fast_path_timeout_s: PositiveFloat = 2.0

    @property
    def mark_delay_s(self) -> float:
        """How long a published row's mark waits for the next enqueue statement to carry
        it before going in a statement of its own: a quarter of `relay_min_age_s` (so
        the relay never takes a row whose mark is merely waiting), at most 0.25 s."""
        return min(0.25, self.relay_min_age_s / 4)


class EventsSettings(BaseModel):
    """The job event feed (GET /events, GET /jobs/{id}/events) and its webhooks."""

    poll_interval_ms: PositiveInt = Field(
        default=500,
        description="How often the API (one query for all its open event streams) and "
        "the webhook relay look for new events.",
    )
    max_streams_per_tenant: PositiveInt = Field(
        default=20,
        description="Event streams one tenant may hold open on one API process; one more is a 429.",
    )
    keep_days: Annotated[float, Field(gt=0, le=MAX_DAYS, allow_inf_nan=False)] = Field(
        default=7.0,
        description="Events are deleted this long after they happened "
        "(maintenance.prune_messages).",
    )
    webhook_timeout_s: PositiveFloat = Field(
        default=10.0, description="How long a webhook receiver has to answer."
    )
    webhook_private_addresses: bool = Field(
        default=False,
        description="Allow webhook URLs on loopback, private, link-local and other "
        "special-purpose addresses (development and tests: a receiver on the same "
        "machine); the API's own address stays refused. Off, such URLs are refused, and "
        "a name that resolves to one is not delivered to.",
    )


class LimitsSettings(BaseModel):
    """How a job waits when its limits say no (see jobrail.limits)."""

    contention_retry_s: PositiveFloat = Field(
        default=0.25,
        description="When a lock or a concurrency slot is taken, look again after at most this.",
    )
    deferral_jitter: Annotated[float, Field(ge=0, le=1)] = Field(
        default=0.2, description="Deferrals wait up to this fraction longer, at random."
    )
    unavailable_retry_max_s: PositiveFloat = Field(
        default=30.0, description="Cap of the backoff while Redis is unreachable."
    )


class ApiLimitRule(BaseModel):
    scope: Literal["ip", "tenant", "global"]
    limit: PositiveInt
    window_s: PositiveFloat
    algorithm: Literal["sliding_window", "token_bucket"] = "sliding_window"


class ApiLimitsSettings(BaseModel):
    """API rate limits by route group. Enqueue routes fail closed without Redis.

    Authenticated routes are limited per tenant and globally, never per client
    address: every tenant behind one NAT or proxy shares an address, so a per-IP
    budget let sixteen tenants use up a seventeenth's. Per-address limits apply to
    what has no tenant: failed authentications (``auth_failures``), counted per client
    address (``api.trusted_proxies`` says when to believe X-Forwarded-For).
    """

    enabled: bool = True
    enqueue: list[ApiLimitRule] = [
        ApiLimitRule(scope="tenant", limit=30, window_s=60),
        ApiLimitRule(scope="global", limit=6000, window_s=60, algorithm="token_bucket"),
    ]
    read: list[ApiLimitRule] = [
        ApiLimitRule(scope="tenant", limit=1200, window_s=60, algorithm="token_bucket"),
    ]
    auth_failures: list[ApiLimitRule] = Field(
        default=[ApiLimitRule(scope="ip", limit=20, window_s=60, algorithm="token_bucket")],
        description="Failed authentications allowed per client address (token buckets): "
        "past them a client gets 429 before its key is looked up.",
    )
    read_fail_open: bool = Field(
        default=True, description="Serve read routes unlimited while Redis is unreachable."
    )

    @model_validator(mode="after")
    def _scopes_fit_their_traffic(self) -> Self:
        for group in ("enqueue", "read"):
            if any(rule.scope == "ip" for rule in getattr(self, group)):
                raise ValueError(
                    f"{group}: per-IP rules are for unauthenticated traffic only "
                    "(auth_failures); tenants behind one address would share one budget"
                )
        for rule in self.auth_failures:
            if rule.scope == "tenant":
                raise ValueError("auth_failures: a failed authentication has no tenant")
            if rule.algorithm != "token_bucket":
                raise ValueError("auth_failures: use token_bucket rules")
        return self


class ApiSettings(BaseModel):
    host: str = "127.0.0.1"
    port: Annotated[int, Field(ge=1, le=65535)] = 8000
    ready_timeout_s: PositiveFloat = 2.0
    docs: bool | None = Field(
        default=None,
        description="Serve /docs and /openapi.json; unset means only in development.",
    )
    cors_origins: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Origins allowed to call the API from a browser; empty allows none.",
    )
    max_body_bytes: PositiveInt = Field(
        default=64 * 1024, description="Larger request bodies are refused with 413."
    )
    max_header_bytes: Annotated[int, Field(ge=1024, le=MAX_COUNT)] = Field(
        default=16 * 1024,
        description="A request line and headers larger than this are refused with 431 "
        "and the connection closed (jobrail api).",
    )
    header_timeout_s: PositiveFloat = Field(
        default=10.0,
        description="A connection that has not sent a whole request line and headers "
        "this long after it opened (or after its previous response) is closed "
        "(jobrail api).",
    )
    body_timeout_s: PositiveFloat = Field(
        default=30.0,
        description="A request whose whole body has not arrived this long after its "
        "headers gets 408 and the connection is closed (jobrail api).",
    )
    trusted_proxies: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Addresses or networks (CIDR) of the proxies in front of the API: "
        "from them, X-Forwarded-For names the client. Empty: the peer is the client, and "
        "X-Forwarded-For is ignored.",
    )

    _split_origins = field_validator("cors_origins", "trusted_proxies", mode="before")(_comma_list)

    @field_validator("trusted_proxies")
    @classmethod
    def _networks(cls, proxies: list[str]) -> list[str]:
        import ipaddress

        for proxy in proxies:
            try:
                ipaddress.ip_network(proxy, strict=False)
            except ValueError:
                raise ValueError(f"{proxy!r} is not an IP address or network") from None
        return proxies


class AuthSettings(BaseModel):
    key_cache_ttl_s: Annotated[float, Field(ge=0, le=MAX_SECONDS, allow_inf_nan=False)] = Field(
        default=10.0,
        description="How long a process trusts what it learnt about a key: a revoked key "
        "stops working within this time.",
    )
    seen_live_s: PositiveFloat = Field(
        default=24 * 3600.0,
        description="How long a process remembers that a key was live: such a key is "
        "still looked up, but not refused for its address's spent budget of failed "
        "authentications.",
    )


class WorkerSettings(BaseModel):
    queues: Annotated[list[str], NoDecode] = Field(
        default_factory=list, description="Queues this worker consumes; empty means all."
    )
    processes: PositiveInt = 1
    max_async_tasks: PositiveInt = 128
    # 2 ms made larger batches (about 10% less CPU per no-op job in the bench), but on a
    # loaded machine it spread the time from a job's admission to its side effect enough
    # that a fleet held to a rate limit made up to one call too many in some window
    # (tests/integration/test_limits_jobs.py, the fleet test, under a CPU hog); 1 ms kept it.
    batch_window_ms: Annotated[float, Field(ge=0, le=50)] = Field(
        default=1.0,
        description="How long a worker gathers Redis and Postgres calls into one batch "
        "(each of a job's four calls waits at most this long; 0: no wait).",
    )
    wave_size: Annotated[int, Field(ge=1, le=256)] = Field(
        default=32,
        description="While at least this many jobs run, a worker starts new deliveries in "
        "waves of this many: the first waits up to wave_wait_ms for the others, so that "
        "each wave is admitted, claimed and recorded with one call each.",
    )
    wave_wait_ms: Annotated[float, Field(ge=0, le=100)] = Field(
        default=10.0,
        description="How long a busy worker holds a delivery for its wave to fill "
        "(0: never; an idle worker never holds one).",
    )
    shutdown_grace_s: PositiveFloat = 30.0

    _split_queues = field_validator("queues", mode="before")(_comma_list)


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


class ScheduleOverride(BaseModel):
    """Change a declared schedule without a release: another cron, or switch it off."""

    # A misspelt key ("crom") was ignored, and the schedule kept its cron without a word.
    model_config = ConfigDict(extra="forbid")

    cron: str | None = None
    enabled: bool = True


class SchedulerSettings(BaseModel):
    """``jobrail scheduler`` and the housekeeping it schedules (see jobrail.scheduler)."""

    embedded: bool = Field(
        default=True,
        description="The embedded mode (`jobrail run`) fires the schedules in its own process "
        "(its leader lock on the in-memory limits backend).",
    )

    tick_s: PositiveFloat = Field(
        default=1.0,
        description="How often a standby scheduler tries to take the lead, and the longest "
        "the leader sleeps between two looks at the clock.",
    )
    leader_ttl_s: Annotated[float, Field(ge=1, le=MAX_SECONDS, allow_inf_nan=False)] = Field(
        default=15.0,
        description="Life of the leader's lock in Redis, renewed every quarter of it: a dead "
        "leader is replaced within leader_ttl_s + tick_s.",
    )
    catch_up_s: PositiveFloat = Field(
        default=300.0,
        description="A period missed (failover, restart, outage) is still fired while it "
        "started less than this ago; older ones are skipped with a warning.",
    )
    schedules: dict[str, ScheduleOverride] = Field(
        default_factory=dict,
        description="Overrides by schedule name (JSON), e.g. "
        '{"prune-jobs": {"cron": "0 4 * * *"}, "dlq-report": {"enabled": false}}.',
    )
    prune_after_days: Days = Field(
        default=30,
        description="prune-jobs deletes finished jobs older than this, then the batches "
        "and chains that finished as long ago and have no job left.",
    )
    outbox_keep_days: Days = Field(
        default=7,
        description="prune-messages deletes outbox rows published longer ago than this "
        "(rows not yet published stay, however old).",
    )
    inbox_keep_days: Days = Field(
        default=45,
        description="prune-messages deletes inbox rows whose message was last taken longer "
        "ago than this; more than prune_after_days (see _inbox_outlives_jobs).",
    )
    outbox_lag_warn_s: PositiveFloat = Field(
        default=60.0,
        description="outbox-lag warns when the oldest unpublished outbox row is older.",
    )

    @model_validator(mode="after")
    def _inbox_outlives_jobs(self) -> Self:
        # An inbox row is what stops a consumer from taking its message twice, and the
        # message can come again as long as the job that carries it exists: a failed job
        # can be redriven until prune-jobs deletes it, prune_after_days after it finished.
        # Each time the job runs it takes the message again and that renews the row's
        # time (jobrail.outbox.inbox), so a row kept longer than finished jobs are
        # outlives every job that could bring its message back.
        if self.inbox_keep_days <= self.prune_after_days:
            raise ValueError(
                "inbox_keep_days must be more than prune_after_days: a failed job can be "
                "redriven until it is pruned, and its message must still be known then"
            )
        return self

    @model_validator(mode="after")
    def _failover_is_caught_up(self) -> Self:
        if self.catch_up_s < self.leader_ttl_s + self.tick_s:
            raise ValueError(
                "catch_up_s must be at least leader_ttl_s + tick_s, or the periods missed "
                "during a failover would be skipped"
            )
        return self


SANDBOX_MODULES: tuple[str, ...] = ("demo",)
"""What ``JOBRAIL_MODULES`` unset loads into jobrail's own processes run without an app
(``jobrail run`` or ``jobrail api`` alone, a sandbox): the demo. A ``JobRail`` of an app
loads its own default instead (``jobrail.modules.with_default_modules``), so that a host
app gets no demo routes and no demo tenant unless it asks for them."""


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        env_nested_delimiter=ENV_NESTED_DELIMITER,
        env_file=".env",
        # Contexts read their own JOBRAIL_<CONTEXT>__* settings from the same .env.
        extra="ignore",
        validate_default=True,
        hide_input_in_errors=True,  # a refused value may be a URL with its password
    )

    mode: Literal["embedded", "stack"] = "embedded"
    environment: Literal["development", "test", "production"] = "development"
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    modules: Annotated[list[str], NoDecode] = Field(
        default_factory=lambda: list(SANDBOX_MODULES),
        description=(
            "Installed modules to load, by entry-point name (group `jobrail.modules`; "
            "jobrail's own: `demo`), comma-separated; empty for none. Unset: `demo` for "
            "jobrail's own processes run without an app, an app's JobRail's own default "
            "(`JobRail(default_modules=...)`: none unless it names some), and none in "
            "production. The platform's housekeeping jobs are always loaded, and an app's "
            "JobRail(modules=[...]) adds its own (`--app`)."
        ),
    )
    database: DatabaseSettings = DatabaseSettings()
    rabbit: RabbitSettings = RabbitSettings()
    redis: RedisSettings = RedisSettings()
    retry: RetrySettings = RetrySettings()
    jobs: JobsSettings = JobsSettings()
    outbox: OutboxSettings = OutboxSettings()
    limits: LimitsSettings = LimitsSettings()
    api: ApiSettings = ApiSettings()
    auth: AuthSettings = AuthSettings()
    demo_api_key: SecretStr = Field(
        default=SecretStr("demo-key"),
        description="Embedded mode on SQLite only: the key of the seeded admin tenant 'demo'.",
    )
    api_limits: ApiLimitsSettings = ApiLimitsSettings()
    worker: WorkerSettings = WorkerSettings()
    scheduler: SchedulerSettings = SchedulerSettings()
    telemetry: TelemetrySettings = TelemetrySettings()
    metrics: MetricsSettings = MetricsSettings()
    ops: OpsSettings = OpsSettings()
    events: EventsSettings = EventsSettings()

    _split_modules = field_validator("modules", mode="before")(_comma_list)

    @field_validator("demo_api_key")
    @classmethod
    def _demo_key_shape(cls, key: SecretStr, info: ValidationInfo) -> SecretStr:
        # Checked here rather than when the tenant is seeded, where a bad key would stop
        # the start-up with a traceback; only where it may be seeded (bootstrap.
        # seeds_demo_tenant: the embedded mode on SQLite, where the demo is loaded, which
        # for an app's JobRail is known only later), as it is used nowhere else.
        from jobrail.kernel.errors import InvalidInputError
        from jobrail.tenants.domain import check_key_shape

        database = info.data.get("database")
        if info.data.get("mode") != "embedded" or database is None or not database.is_sqlite:
            return key

        try:
            check_key_shape(key.get_secret_value())
        except InvalidInputError as exc:
            raise ValueError(str(exc)) from None
        return key

    @field_validator("environment")
    @classmethod
    def _production_is_the_stack(cls, environment: str, info: ValidationInfo) -> str:
        # The embedded mode is a sandbox: SQLite, an in-memory broker, and an admin tenant
        # with a well-known key seeded at start-up. It is the default mode, so a production
        # deployment that forgot JOBRAIL_MODE=stack would otherwise run it.
        if environment == "production" and info.data.get("mode") == "embedded":
            raise ValueError(
                "production does not run the embedded mode (SQLite, an in-memory broker, "
                "an admin tenant 'demo' with a well-known key): set JOBRAIL_MODE=stack"
            )
        return environment

    @model_validator(mode="after")
    def _no_demo_in_production_unless_named(self) -> Self:
        # The demo's routes let any tenant queue jobs that sleep for up to an hour: a
        # sandbox's default, not a production deployment's, which names it if it wants it.
        if self.environment == "production" and "modules" not in self.model_fields_set:
            self.modules = []
        return self

    @field_validator("events")
    @classmethod
    def _no_private_webhooks_in_production(
        cls, events: EventsSettings, info: ValidationInfo
    ) -> EventsSettings:
        # Webhook URLs are the tenants' to choose: on private addresses, any tenant could
        # make the platform call into its own network.
        if info.data.get("environment") == "production" and events.webhook_private_addresses:
            raise ValueError(
                "production never delivers webhooks to loopback, private or link-local "
                "addresses: JOBRAIL_EVENTS__WEBHOOK_PRIVATE_ADDRESSES is for development "
                "and tests"
            )
        return events

    @model_validator(mode="after")
    def _worker_queues_known(self) -> Self:
        unknown = set(self.worker.queues) - set(self.rabbit.queues)
        if unknown:
            raise ValueError(
                f"worker.queues names queues that rabbit.queues does not have: {sorted(unknown)}"
            )
        return self

    @property
    def embedded(self) -> bool:
        return self.mode == "embedded"

    @property
    def docs_enabled(self) -> bool:
        if self.api.docs is not None:
            return self.api.docs
        return self.environment == "development"

    def check_can_serve(self, *, worker: bool) -> None:
        """What production refuses in a process that serves (the API, a worker), checked
        when it starts rather than with every setting: `jobrail migrate` or `jobrail
        tenants` need no metrics token. Raises SettingsError."""
        if self.environment != "production":
            return
        token = self.metrics.token.get_secret_value() if self.metrics.token else ""
        serves = self.metrics.worker_port != 0 if worker else self.metrics.api_enabled
        if serves and not token:
            off = "WORKER_PORT=0" if worker else "API_ENABLED=false"
            raise SettingsError(
                "invalid settings:\n  JOBRAIL_METRICS__TOKEN: production serves /metrics only "
                "to a scraper that sends this token (Authorization: Bearer <token>): set it, "
                f"or turn the metrics off with JOBRAIL_METRICS__{off}"
            )


class SettingsError(Exception):
    """Raised at start-up when a setting is missing or invalid."""


def _env_name(loc: tuple[str | int, ...]) -> str:
    parts = [str(part) for part in loc if not isinstance(part, int)]
    return ENV_PREFIX + ENV_NESTED_DELIMITER.join(parts).upper()


def load_settings(**overrides: object) -> Settings:
    """Read settings from the environment; raise ``SettingsError`` naming every bad one."""
    try:
        return Settings(**overrides)  # type: ignore[arg-type]
    except ValidationError as exc:
        problems = []
        for error in exc.errors():
            loc = tuple(error["loc"])
            name = _env_name(loc) if loc else ENV_PREFIX + "*"
            problems.append(f"  {name}: {error['msg']}")
        raise SettingsError("invalid settings:\n" + "\n".join(problems)) from None
    except PydanticSettingsError as exc:
        raise SettingsError(f"invalid settings:\n  {_unparsed(exc)}") from None
    except ValueError as exc:
        raise SettingsError(f"invalid settings: {exc}") from None


def _unparsed(error: PydanticSettingsError) -> str:
    """pydantic-settings names the section whose JSON value did not parse ("api_limits"),
    not the variable: name the variables of that section that look like JSON and do not
    parse (from the environment; one in `.env` only is named by its section)."""
    import json
    import os

    found = re.search(r'field "([^"]+)"', str(error))
    section = ENV_PREFIX + (found.group(1).upper() if found else "")
    cause = error.__cause__
    why = f"is not valid JSON ({cause})" if cause is not None else "does not parse"
    names = []
    for name, value in os.environ.items():
        if not name.upper().startswith(section) or not value.lstrip().startswith(("{", "[")):
            continue
        try:
            json.loads(value)
        except ValueError:
            names.append(name.upper())
    return f"{', '.join(sorted(names)) or section + ENV_NESTED_DELIMITER + '*'}: {why}"
