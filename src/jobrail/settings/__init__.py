"""Settings, split by concern. Every value can come from the environment.

Variables are prefixed with ``JOBRAIL_`` and nested with ``__``:
``JOBRAIL_DATABASE__URL``, ``JOBRAIL_RETRY__MAX_ATTEMPTS``. A ``.env`` file in the
working directory is read too. A bad value stops the process at start-up with a
message that names the variable (see ``load_settings``).

Each section is a model in the module of its concern:

- ``database``: the database's URL, pool and schema;
- ``rabbit``: the broker, its queues and delay tiers;
- ``limits``: the limits backend (Redis), and how a job waits on its limits;
- ``jobs``: retries, a job's timeout and lease, the worker;
- ``outbox``: the relay;
- ``dispatch``: fair dispatch, the dispatcher's credit and lease;
- ``events``: the job event feed and its webhooks;
- ``api``: the server, keys, and the API's rate limits;
- ``scheduler``: ``jobrail scheduler`` and its housekeeping;
- ``watch``: metrics, tracing, the ops page's sign-in;
- ``root``: ``Settings``, the checks across sections, and ``load_settings``;
- ``values``: the bounds and shapes of values that the sections share.

Import them from here: ``from jobrail.settings import Settings, load_settings``.
"""

from jobrail.settings.api import ApiLimitRule, ApiLimitsSettings, ApiSettings, AuthSettings
from jobrail.settings.database import DatabaseSettings
from jobrail.settings.dispatch import DispatchSettings
from jobrail.settings.events import EventsSettings
from jobrail.settings.jobs import JobsSettings, RetrySettings, WorkerSettings
from jobrail.settings.limits import LimitsSettings, RedisSettings
from jobrail.settings.outbox import OutboxSettings
from jobrail.settings.rabbit import RabbitSettings
from jobrail.settings.root import (
    ENV_NESTED_DELIMITER,
    ENV_PREFIX,
    SANDBOX_MODULES,
    Settings,
    SettingsError,
    load_settings,
)
from jobrail.settings.scheduler import ScheduleOverride, SchedulerSettings
from jobrail.settings.values import (
    MAX_COUNT,
    MAX_DAYS,
    MAX_SECONDS,
    Days,
    PositiveFloat,
    PositiveInt,
)
from jobrail.settings.watch import MetricsSettings, OpsSettings, TelemetrySettings

__all__ = [
    "ENV_NESTED_DELIMITER",
    "ENV_PREFIX",
    "MAX_COUNT",
    "MAX_DAYS",
    "MAX_SECONDS",
    "SANDBOX_MODULES",
    "ApiLimitRule",
    "ApiLimitsSettings",
    "ApiSettings",
    "AuthSettings",
    "DatabaseSettings",
    "Days",
    "DispatchSettings",
    "EventsSettings",
    "JobsSettings",
    "LimitsSettings",
    "MetricsSettings",
    "OpsSettings",
    "OutboxSettings",
    "PositiveFloat",
    "PositiveInt",
    "RabbitSettings",
    "RedisSettings",
    "RetrySettings",
    "ScheduleOverride",
    "SchedulerSettings",
    "Settings",
    "SettingsError",
    "TelemetrySettings",
    "WorkerSettings",
    "load_settings",
]
