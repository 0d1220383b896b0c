"""Job messages as the job core sees them, whatever carries them.

A job message is a pointer to work, never the work itself: it names a job (its id,
type, queue and tenant) and carries what a worker needs to start it without reading
it first (its due time and its limit keys), what the limits said about it before (its
deferrals, the tokens reserved for it, its outages in a row) and the trace context
of its enqueue. The job row holds the payload.

`JobMessage.of` is the one place a message is made from a job. How a message looks
on the wire (a Taskiq message, the dead-letter headers) is the business of one codec
adapter, ``jobrail.transport.codec``; nothing in the job core knows it.
"""

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime

from jobrail.jobs.domain import Job
from jobrail.kernel.ids import JobId, new_id


def _new_message_id() -> str:
    return str(new_id())


@dataclass(frozen=True, slots=True)
class JobMessage:
    """One message for one job: the worker's delivery, and what the core sends."""

    job_id: JobId
    job_type: str
    queue: str
    tenant_id: str
    message_id: str = field(default_factory=_new_message_id)
    """The message's own id (Taskiq's task id). Every message the core makes has a new
    UUID; a delivery keeps the id it arrived with, whatever its sender chose."""
    deferrals: int = 0
    """How many times the limits have sent the job round again (no attempt spent)."""
    not_before: datetime | None = None
    """When the job is due: a worker that gets the message earlier sends it round again."""
    prepaid: tuple[str, ...] = ()
    """Token buckets whose token was reserved for this job (``limits.gate.reservation``)."""
    limit_keys: tuple[str, ...] | None = None
    """The keys of the job's limits and lock, filled in from its payload (None: the
    message does not say, and the worker reads the job to fill them in)."""
    trace_context: Mapping[str, str] = field(default_factory=dict)
    """The W3C trace context of the job's enqueue (traceparent, tracestate)."""
    outages: int = 0
    """Deferrals in a row because the limits store could not be reached (its backoff)."""
    waiting_since: datetime | None = None
    """When the limits first deferred the job since it last ran (None: never)."""
    deadline: datetime | None = None
    """The job's deadline: a worker that gets the message at or after it expires the job
    without gating or claiming it."""

    @classmethod
    def of(
        cls,
        job: Job,
        *,
        limit_keys: Sequence[str] | None = None,
        not_before: datetime | None = None,
    ) -> "JobMessage":
        """A new message for `job`: its ids, its trace context and, when given, its
        limit keys and due time."""
        return cls(
            job_id=job.id,
            job_type=job.type,
            queue=job.queue,
            tenant_id=job.tenant_id,
            not_before=not_before,
            limit_keys=None if limit_keys is None else tuple(limit_keys),
            trace_context=dict(job.trace_context),
            deadline=job.deadline,
        )

    def names(self, job: Job) -> bool:
        """Whether `job` is the one this message says it is (its tenant and its type),
        as a claim checks: a message naming another's job is never run on its word."""
        return (job.tenant_id, job.type) == (self.tenant_id, self.job_type)

    def again(
        self,
        not_before: datetime | None = None,
        *,
        deferred: bool = False,
        prepaid: Sequence[str] | None = None,
        outages: int | None = None,
        waiting_since: datetime | None = None,
    ) -> "JobMessage":
        """The same message under a new id, to send anew (counting a deferral by the
        limits with `deferred`, which started waiting at `waiting_since` unless it
        already was)."""
        return replace(
            self,
            message_id=_new_message_id(),
            not_before=not_before,
            deferrals=self.deferrals + 1 if deferred else self.deferrals,
            prepaid=self.prepaid if prepaid is None else tuple(prepaid),
            outages=self.outages if outages is None else outages,
            waiting_since=self.waiting_since or waiting_since,
        )


@dataclass(frozen=True, slots=True)
class DeadLetterMessage:
    """A job message on its way to the dead-letter queue, with why.

    `message` keeps the id of the message that died; the letter itself travels (and is
    stored in the outbox) under an id of its own."""

    message: JobMessage
    reason: str
    source_queue: str
    dead_letter_queue: str
    at: datetime
    job_failed_at: datetime | None = None
    """On the letter of a failed job: the job's finished_at when it failed. It tells the
    letter of the job's current failure from stale ones (see RedriveDeadLetters)."""
    id: uuid.UUID = field(default_factory=new_id)


Outgoing = JobMessage | DeadLetterMessage
"""What the job core sends: through the outbox, or published at once."""


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """A message in the dead-letter queue, as operators see it."""

    id: str
    reason: str
    source_queue: str
    dead_at: str
    job_id: JobId | None
    """None when the message is not a job message (malformed, pickled, ...)."""
    job_type: str | None
    tenant_id: str | None
    preview: str
    """The start of the body of a message that is not a job message, else ''."""
    job_failed_at: datetime | None = None
    """For the letter of a failed job: the job's finished_at when it failed."""
