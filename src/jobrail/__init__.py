"""jobrail: durable jobs for FastAPI services on Taskiq, RabbitMQ, Postgres and Redis.

A host app uses it through ``JobRail`` (``from jobrail import JobRail``). The names
below are imported on first use, so that importing any part of jobrail does not
import the facade and everything it composes.
"""

from typing import TYPE_CHECKING, Any

from jobrail.version import __version__

if TYPE_CHECKING:
    from jobrail.facade import JobHandle, JobRail
    from jobrail.jobs.context import JobContext
    from jobrail.jobs.ports import EnqueueResult
    from jobrail.kernel.errors import PermanentError, TransientError
    from jobrail.limits.model import Concurrency, Lock, SlidingWindow, TokenBucket
    from jobrail.modules import Module

__all__ = [
    "Concurrency",
    "EnqueueResult",
    "JobContext",
    "JobHandle",
    "JobRail",
    "Lock",
    "Module",
    "PermanentError",
    "SlidingWindow",
    "TokenBucket",
    "TransientError",
    "__version__",
]

_EXPORTS = {
    "JobRail": "jobrail.facade",
    "JobHandle": "jobrail.facade",
    "JobContext": "jobrail.jobs.context",
    "EnqueueResult": "jobrail.jobs.ports",
    "PermanentError": "jobrail.kernel.errors",
    "TransientError": "jobrail.kernel.errors",
    "Concurrency": "jobrail.limits.model",
    "Lock": "jobrail.limits.model",
    "SlidingWindow": "jobrail.limits.model",
    "TokenBucket": "jobrail.limits.model",
    "Module": "jobrail.modules",
}


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'jobrail' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
