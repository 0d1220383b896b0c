"""A job type as the runner runs it (`JobRun`), and one delivery's way through the runner
as its middleware see it (`Attempt`, see ``jobrail.jobs.middleware``)."""

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from jobrail.jobs.context import JobContext
from jobrail.jobs.domain import Job
from jobrail.jobs.messages import JobMessage
from jobrail.jobs.ports import ClaimToken
from jobrail.jobs.watchdog import Kept
from jobrail.limits.model import JobLimits

Handler = Callable[[Mapping[str, Any], JobContext], Awaitable[Mapping[str, Any] | None]]


@dataclass(frozen=True, slots=True)
class JobRun:
    """What the runner needs of a job type."""

    handler: Handler
    timeout: timedelta
    limits: JobLimits = field(default_factory=JobLimits)
    retry_base_s: float | None = None
    """The type's own retry backoff base and cap (None: the platform's policy)."""
    retry_cap_s: float | None = None
    max_wait: timedelta | None = None
    """How long a job may wait for its limits and lock, from its first deferral since
    it last ran, before it fails (None: as long as it takes)."""


@dataclass(slots=True)
class Attempt:
    """One delivery on its way through admit → claim → attempt → record.

    The runner fills in `job` and `token` once it has claimed the job; the middleware
    say, after the claim, what the attempt holds: the `fence` the handler gets, and what
    the attempt's watchdog must keep renewed while the handler runs (`kept`)."""

    delivery: JobMessage
    run: JobRun
    read: Callable[[], Awaitable[Job | None]]
    """The job as stored now (waiting out a database outage)."""
    job: Job | None = None
    token: ClaimToken | None = None
    fence: int | None = None
    kept: tuple[Kept, ...] = ()
