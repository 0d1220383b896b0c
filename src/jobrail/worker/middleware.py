"""The attempt's middleware: a small, ordered chain of hooks around the claim and the
attempt, as dramatiq's middleware are around a message.

Taskiq's own middleware cannot host them: an exception in ``pre_execute`` leaves the
RabbitMQ message unacknowledged, and ``pre_execute`` cannot skip the task. So the runner
(``jobrail.worker.runner``) runs this chain inside task execution, where being turned away
is a deferral. The chain and its order are set in one place, the composition root
(``jobrail.runtime.container``).

For each delivery, the middleware that apply to its job type (`applies_to`; the others
are skipped without an await) are called at `before_claim` first to last, at
`after_claim` first to last once the job is claimed, and at `after_attempt` last to
first, as dramatiq's ``before_process_message`` and ``after_process_message`` are. Each
keeps its own state for the attempt (`S`), which the runner hands back to its later
hooks, so that one middleware object serves every delivery at once.

An exception in `before_claim` or `after_claim` is the runner's unexpected error: before
the claim the message is sent round again; after it, the job keeps its lease and the
lease sweep brings it back.

The limits and the job's lock are one middleware (``jobrail.worker.admission``).
"""

from dataclasses import dataclass
from datetime import datetime
from typing import Protocol, TypeVar

from jobrail.jobs.domain import Job, Wait
from jobrail.jobs.messages import JobMessage
from jobrail.worker.attempt import Attempt, JobRun

S = TypeVar("S")


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
    delivery goes where an unclaimed one goes (``jobrail.worker.rerouting.unclaimed``)."""

    current: Job | None
    now: datetime


@dataclass(frozen=True, slots=True)
class GiveBack:
    """Turned away after the claim: the job gives its claim and its attempt back (it is
    throttled at `now` with `reason`) and `message` goes round again."""

    message: JobMessage
    reason: str
    now: datetime

    @property
    def run_after(self) -> datetime:
        assert self.message.not_before is not None
        return self.message.not_before


class AttemptMiddleware(Protocol[S]):
    """One link of the chain (see the module). `S` is its own state for one attempt."""

    def applies_to(self, run: JobRun) -> bool:
        """Whether it takes part in the attempts of this job type."""
        ...

    async def before_claim(self, attempt: Attempt) -> S | Defer | NotStartable | GiveUp:
        """Let the delivery in (its state for the attempt) or turn it away; no attempt
        is spent either way, but for giving up."""
        ...

    async def after_claim(self, attempt: Attempt, state: S) -> S | GiveBack:
        """The job is claimed (`Attempt.job`): say what the attempt holds (`Attempt.fence`,
        `Attempt.kept`) and return the state again, or give the claim back."""
        ...

    async def after_attempt(self, attempt: Attempt, state: S) -> None:
        """The delivery is done with, whatever happened after `before_claim` let it in:
        the outcome recorded, or the job never claimed (`Attempt.job` is None), or
        turned away by another middleware. A failure here is logged; it keeps neither
        the other middleware from theirs nor the outcome from being sent."""
        ...
