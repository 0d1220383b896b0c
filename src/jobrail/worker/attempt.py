"""What the runner works with: a job type as it runs it (`JobRun`), its settings
(`RunnerConfig`), who it tells what happened (`JobObserver`), and one delivery's way
through it as its middleware see it (`Attempt`, see ``jobrail.worker.middleware``)."""

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Protocol

from jobrail.jobs.domain import Job
from jobrail.jobs.messages import JobMessage
from jobrail.jobs.ports import ClaimToken
from jobrail.limits.model import JobLimits
from jobrail.worker.context import JobContext
from jobrail.worker.watchdog import Kept

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


class JobObserver(Protocol):
    """Told what happens to jobs in this worker (metrics, tracing). Must not raise."""

    def claimed(self, job: Job) -> None:
        """An attempt started: `job` is running, `started_at` set."""

    def recorded(self, job: Job, attempt_started_at: datetime) -> None:
        """An attempt's outcome was written: `job.status` is succeeded, failed,
        retrying or cancelled."""


class NoObserver:
    def claimed(self, job: Job) -> None:
        return None

    def recorded(self, job: Job, attempt_started_at: datetime) -> None:
        return None


@dataclass(frozen=True, slots=True)
class RunnerConfig:
    dead_letter_queue: str
    lease_grace: timedelta
    store_retry_max: timedelta
    lease: timedelta | None = None
    """A job whose timeout + grace is longer claims this much, renewed every third of
    it while it runs, so a worker that dies mid-job frees it this soon rather than
    after its whole timeout. None: one lease of timeout + grace."""
    max_result_bytes: int = 64 * 1024
    """A handler's result larger than this (as UTF-8 JSON) fails the job permanently:
    the jobs table holds small results, not blobs (JOBRAIL_JOBS__MAX_RESULT_BYTES)."""
    progress_interval: timedelta = timedelta(milliseconds=250)
    """An attempt writes its progress reports at most once per this
    (JOBRAIL_JOBS__PROGRESS_INTERVAL_MS, see ``jobrail.worker.progress``)."""

    def lease_of(self, timeout: timedelta) -> tuple[timedelta, bool]:
        """How long a claim of a job with this timeout lasts, and whether it is renewed."""
        lease = timeout + self.lease_grace
        if self.lease is not None and lease > self.lease:
            return self.lease, True
        return lease, False
