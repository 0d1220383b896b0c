"""jobrail: durable jobs for FastAPI services on Taskiq, RabbitMQ, Postgres and Redis.

Public: the names below are what declares and runs jobs and modules. A host app uses
``JobRail`` (``from jobrail import JobRail``; ``SchemaNotMigratedError`` is what its
lifespan raises on a database not migrated for it); a module declares its job types with
``job``, its periodic jobs with ``Schedule``, its integration events with ``EventSpec``,
and plugs in as a ``Module``; its adapters give the HTTP clients they make to
``Instruments``, so that their calls join the trace of the job that makes them. The
names are imported on first use, so that importing any part of jobrail does not import
the facade and everything it composes.

The rest of jobrail's public surface is a few modules, each for one side of a module:
``jobrail.kernel`` (shared value types: ids, errors, clock, money, events),
``jobrail.ports`` (what its use cases depend on), ``jobrail.web`` (what its FastAPI
routes use) and ``jobrail.sql`` (what its SQLAlchemy adapters use). Everything else
is internal and may change without notice.
"""

from typing import TYPE_CHECKING, Any

from jobrail.version import __version__

if TYPE_CHECKING:
    from jobrail.events.catalog import EventCatalog, EventDelivery, EventSpec
    from jobrail.facade import JobHandle, JobRail
    from jobrail.jobs.intake import EnqueueJobCommand, EnqueueResult
    from jobrail.jobs.registry import job
    from jobrail.kernel.errors import PermanentError, TransientError
    from jobrail.limits.model import Concurrency, Lock, SlidingWindow, TokenBucket
    from jobrail.modules import Module
    from jobrail.scheduler.schedule import SYSTEM_TENANT, Schedule
    from jobrail.settings import Settings, SettingsError
    from jobrail.store.schema import SchemaNotMigratedError
    from jobrail.telemetry.instruments import Instruments
    from jobrail.worker.context import JobContext

__all__ = [
    "SYSTEM_TENANT",
    "Concurrency",
    "EnqueueJobCommand",
    "EnqueueResult",
    "EventCatalog",
    "EventDelivery",
    "EventSpec",
    "Instruments",
    "JobContext",
    "JobHandle",
    "JobRail",
    "Lock",
    "Module",
    "PermanentError",
    "Priority",
    "Schedule",
    "SchemaNotMigratedError",
    "Settings",
    "SettingsError",
    "SlidingWindow",
    "TokenBucket",
    "TransientError",
    "__version__",
    "job",
]

_EXPORTS = {
    "JobRail": "jobrail.facade",
    "JobHandle": "jobrail.facade",
    "JobContext": "jobrail.worker.context",
    "EventCatalog": "jobrail.events.catalog",
    "EventDelivery": "jobrail.events.catalog",
    "EventSpec": "jobrail.events.catalog",
    "Instruments": "jobrail.telemetry.instruments",
    "EnqueueJobCommand": "jobrail.jobs.intake",
    "EnqueueResult": "jobrail.jobs.intake",
    "job": "jobrail.jobs.registry",
    "Priority": "jobrail.jobs.priority",
    "PermanentError": "jobrail.kernel.errors",
    "TransientError": "jobrail.kernel.errors",
    "Concurrency": "jobrail.limits.model",
    "Lock": "jobrail.limits.model",
    "SlidingWindow": "jobrail.limits.model",
    "TokenBucket": "jobrail.limits.model",
    "Module": "jobrail.modules",
    "SchemaNotMigratedError": "jobrail.store.schema",
    "SYSTEM_TENANT": "jobrail.scheduler.schedule",
    "Schedule": "jobrail.scheduler.schedule",
    "Settings": "jobrail.settings",
    "SettingsError": "jobrail.settings",
}


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'jobrail' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
