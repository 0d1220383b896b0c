"""One delivery's attempt as the runner and its middleware see it.

What the runner works with: a job type as it runs it (`JobRun`), its settings
(`RunnerConfig`), who it tells what happened (`JobObserver`), one delivery on its way
(`Attempt`), and the attempt's middleware (`AttemptMiddleware`): callables composed
around the runner's own step (claim → attempt → record), as Starlette's and dramatiq's
middleware are around a request or a message.

Taskiq's own middleware cannot host them: an exception in ``pre_execute`` leaves the
RabbitMQ message unacknowledged, and ``pre_execute`` cannot skip the task. So the runner
(``jobrail.worker.runner``) runs this chain inside task execution, where being turned away
is a deferral. The chain and its order are set in one place, the composition root
(``jobrail.runtime.container``); the limits and the job's lock are one middleware
(``jobrail.worker.admission``).

A middleware is called with the attempt and the rest of the chain (`call_next`). It lets
the delivery in by awaiting `call_next` and returning what it returns, or turns it away
by returning `Defer`, `NotStartable` or `GiveUp` instead; what it does after `call_next`
(in a ``finally``) runs once the delivery is done with, whatever happened. To act once
the job is claimed, before its handler starts, it adds a hook to `Attempt.on_claimed`:
the hooks run first to last, and one may give the claim back (`GiveBack`). Only the
middleware that apply to a job type (`applies_to`) are in its chain: a job type none
applies to runs the runner's step alone.

Whatever the chain returns, the runner acts on it once every middleware has let go:
it sends a deferred message round, claims and fails a job that gave up, waits out
another attempt's lease, or sends the messages of a recorded outcome.
"""

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Protocol

from jobrail.jobs.domain import Job, Wait
from jobrail.jobs.messages import JobMessage, Outgoing
from jobrail.jobs.ports import ClaimToken
from jobrail.limits.model import JobLimits
from jobrail.worker.context import JobContext
from jobrail.worker.failures import AttemptFailure
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


@dataclass(frozen=True, slots=True)
class Defer:
    """Turned away before the claim: `message` goes round again instead; the job notes
    what it waits for (`wait`), when known."""

    message: JobMessage
    wait: Wait | None = None


@dataclass(frozen=True, slots=True)
class GiveUp:
    """Turned away for good before the claim: the job has waited longer than its type
    allows. It is claimed and failed with `reason`, without running."""

    reason: str


@dataclass(frozen=True, slots=True)
class NotStartable:
    """The job, as read at `now` (`current`, None if there is none), cannot start: the
    delivery goes where an unclaimed one goes (``jobrail.worker.outcomes.unclaimed``)."""

    current: Job | None
    now: datetime


@dataclass(frozen=True, slots=True)
class GiveBack:
    """Turned away after the claim: the job gives its claim and its attempt back (it is
    throttled at `now` with `reason`) and `message` goes round again. `wait`: what turned
    it away, noted on the job as a deferral before the claim is."""

    message: JobMessage
    reason: str
    now: datetime
    wait: Wait | None = None

    @property
    def run_after(self) -> datetime:
        assert self.message.not_before is not None
        return self.message.not_before


@dataclass(frozen=True, slots=True)
class Leased:
    """The claim failed on a live lease: `job`, as read, is another attempt's."""

    job: Job


@dataclass(frozen=True, slots=True)
class Recorded:
    """The outcome is written: `messages` are sent once the middleware have let go."""

    messages: Sequence[Outgoing] = ()


Ending = Defer | NotStartable | GiveUp | Leased | Recorded | None
"""What a delivery's way through the chain ends in (None: nothing more to do)."""


@dataclass(slots=True)
class Attempt:
    """One delivery on its way through admit → claim → attempt → record.

    The runner fills in `job` and `token` once it has claimed the job; the middleware
    say, in their `on_claimed` hooks, what the attempt holds: the `fence` the handler
    gets, and what the attempt's watchdog must keep renewed while the handler runs
    (`kept`)."""

    delivery: JobMessage
    run: JobRun
    read: Callable[[], Awaitable[Job | None]]
    """The job as stored now (waiting out a database outage)."""
    job: Job | None = None
    token: ClaimToken | None = None
    fence: int | None = None
    kept: tuple[Kept, ...] = ()
    outcome: Sequence[Outgoing] = ()
    """The recorded outcome's messages, once written (sent even if a middleware fails
    as it lets go)."""
    on_claimed: tuple[Callable[["Attempt"], Awaitable[GiveBack | None]], ...] = ()
    failure: AttemptFailure | None = None
    """The handler's error and traceback when it raised (noted once recorded)."""


Step = Callable[[Attempt], Awaitable[Ending]]
"""The rest of the chain, the runner's own step last."""


class AttemptMiddleware(Protocol):
    """One link of the chain (see the module)."""

    def applies_to(self, run: JobRun) -> bool:
        """Whether it takes part in the attempts of this job type."""
        ...

    async def __call__(self, attempt: Attempt, call_next: Step) -> Ending:
        """Let the delivery in (`await call_next(attempt)`) or turn it away; no attempt
        is spent either way, but for giving up. An exception before `call_next` sends
        the message round again; after the claim, the job keeps its lease and the lease
        sweep brings it back. What it does once the delivery is done with should not
        raise: an exception there is logged, and the outcome's messages still go."""
        ...


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


def compose(applying: Sequence[AttemptMiddleware], job_run: JobRun, step: Step) -> Step:
    """`step` inside the middleware that apply to `job_run`, the first outermost: `step`
    itself when none applies and the type declares no limits. Fail closed: a limited
    type's chain without a middleware that enforces its limits refuses to run."""
    if not applying and not job_run.limits:
        return step
    chain: Step = _unenforced if not applying else step
    for middleware in reversed(applying):
        chain = _link(middleware, chain)
    return chain


def _link(middleware: AttemptMiddleware, call_next: Step) -> Step:
    return lambda attempt: middleware(attempt, call_next)


async def _unenforced(attempt: Attempt) -> Ending:
    delivery = attempt.delivery
    raise RuntimeError(
        f"job {delivery.job_id} ({delivery.job_type}) declares limits, but no "
        "attempt middleware enforces them"
    )
