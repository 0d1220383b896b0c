"""The settings as a whole: every section under one root read from the environment, the
checks across sections (what production refuses), and ``load_settings``, which turns a bad
value into a message that names its variable."""

import re
from typing import Annotated, Literal, Self

from pydantic import (
    Field,
    SecretStr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict
from pydantic_settings import SettingsError as PydanticSettingsError

from jobrail.settings.api import ApiLimitsSettings, ApiSettings, AuthSettings
from jobrail.settings.database import DatabaseSettings
from jobrail.settings.dispatch import DispatchSettings
from jobrail.settings.events import EventsSettings
from jobrail.settings.jobs import JobsSettings, RetrySettings, WorkerSettings
from jobrail.settings.limits import LimitsSettings, RedisSettings
from jobrail.settings.outbox import OutboxSettings
from jobrail.settings.rabbit import RabbitSettings
from jobrail.settings.scheduler import SchedulerSettings
from jobrail.settings.values import comma_list
from jobrail.settings.watch import MetricsSettings, OpsSettings, TelemetrySettings

ENV_PREFIX = "JOBRAIL_"
ENV_NESTED_DELIMITER = "__"

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
    dispatch: DispatchSettings = DispatchSettings()
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

    _split_modules = field_validator("modules", mode="before")(comma_list)

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
