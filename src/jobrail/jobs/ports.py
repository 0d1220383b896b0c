"""Ports of the jobs application layer: the unit of work over jobs, their flows and the
outbox, its repositories, and the values its listings and the claims of attempts pass;
and what a transaction records for integration events. Adapters live in store/ and
outbox/.

The other ports of the layer: enqueueing (``jobs/intake.py``), publishing after the
commit (``jobs/publishing.py``), the operators' reads (``jobs/operator_reads.py``); the
worker's job store is the worker's (``worker/job_store.py``) and the dead-letter queue
the operators' (``ops/ports.py``).
"""

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol, Self

from jobrail.jobs.domain import FlowRole, Job, JobStatus
from jobrail.jobs.flow import Flow, FlowId
from jobrail.jobs.messages import Outgoing
from jobrail.kernel.events import IntegrationEvent
from jobrail.kernel.ids import JobId, TenantId


@dataclass(frozen=True, slots=True)
class JobFilter:
    tenant_id: TenantId | None
    """None: every tenant's jobs (operators only)."""
    status: JobStatus | None = None
    type: str | None = None
    entity_id: str | None = None
    queue: str | None = None


@dataclass(frozen=True, slots=True)
class CancelFilter:
    """Which jobs a bulk cancel takes: those of `tenant_id` (None: every tenant's) in
    one of `statuses`, and of `type`, `entity_id` and created before `created_before`
    when given."""

    statuses: frozenset[JobStatus]
    tenant_id: TenantId | None = None
    type: str | None = None
    entity_id: str | None = None
    created_before: datetime | None = None


@dataclass(frozen=True, slots=True)
class Cursor:
    """Position after the last job of a page (jobs are listed newest first)."""

    created_at: datetime
    job_id: JobId


@dataclass(frozen=True, slots=True)
class JobPage:
    items: Sequence[Job]
    next_cursor: Cursor | None


class JobRepository(Protocol):
    async def add(self, job: Job) -> Job:
        """Insert the job; if its tenant already has a job with its idempotency key,
        insert nothing and return that job instead."""
        ...

    async def get(
        self, job_id: JobId, tenant_id: TenantId | None = None, *, for_update: bool = False
    ) -> Job | None:
        """The job, or None when it does not exist or belongs to another tenant.
        `for_update` locks the row until the transaction ends."""
        ...

    async def list(self, where: JobFilter, limit: int, after: Cursor | None) -> JobPage: ...

    async def to_cancel(self, where: CancelFilter, limit: int) -> Sequence[JobId]:
        """Up to `limit` ids of the jobs `where` takes that a cancel would change (not
        running with a cancel asked already), oldest first."""
        ...

    async def save(self, job: Job) -> None:
        """Write the job's mutable state back."""
        ...

    async def add_new(self, jobs: Sequence[Job]) -> None:
        """Insert jobs that carry no idempotency key (a flow's), all in one statement."""
        ...

    async def save_held(self, job: Job, claim: "ClaimToken") -> bool:
        """Write the outcome of an attempt back, only if the job is still running that
        claim (as JobStore.record). False when another worker took it over."""
        ...

    async def save_held_many(self, held: Sequence[tuple[Job, "ClaimToken"]]) -> Sequence[bool]:
        """`save_held` for each (in one statement where the store can); whether each
        was written."""
        ...

    def take_created(self) -> Sequence[str]:
        """The types of the jobs it inserted since the last call (`add`: a new one, not
        an idempotent replay; `add_new`: each), and forget them: what its unit of work's
        commit counts as enqueued. Every job a transaction creates is inserted here,
        whatever made it (an enqueue, an event's delivery, a batch, a chain), so none
        goes uncounted."""
        ...


class FlowRepository(Protocol):
    """Batches and chains (jobrail.jobs.flow), and their jobs, in a unit of work.
    Whoever locks a flow's row locks it before any of its jobs' rows."""

    async def add(self, flow: Flow) -> Flow:
        """Insert the flow; if its tenant already has one with its idempotency key,
        insert nothing and return that one instead."""
        ...

    async def get(
        self, flow_id: FlowId, tenant_id: TenantId | None = None, *, for_update: bool = False
    ) -> Flow | None: ...

    async def save(self, flow: Flow) -> None: ...

    async def jobs(
        self,
        flow_id: FlowId,
        *,
        roles: Sequence[FlowRole] | None = None,
        statuses: Sequence[JobStatus] | None = None,
        for_update: bool = False,
        limit: int | None = None,
    ) -> list[Job]:
        """The flow's jobs (of those roles, in those states), in the order they were
        made (a chain's steps in order); the first `limit` of them when given."""
        ...

    async def counts(self, flow_id: FlowId) -> dict[JobStatus, int]:
        """The flow's members by status (callbacks not counted)."""
        ...


class Outbox(Protocol):
    async def add(self, message: Outgoing, *, dispatch: bool = True) -> None:
        """Record a message to publish once the transaction commits. `dispatch=False`:
        its caller publishes it itself after the commit (the relay does if it cannot)."""
        ...

    async def add_many(self, messages: Sequence[Outgoing]) -> None:
        """`add` for many messages, in one statement."""
        ...


class JobsUnitOfWork(Protocol):
    """One transaction over jobs, their flows and the outbox. Rolls back unless `commit`
    is called; after a commit, the outbox's new messages are handed to the publisher."""

    @property
    def jobs(self) -> JobRepository: ...

    @property
    def outbox(self) -> Outbox: ...

    @property
    def flows(self) -> FlowRepository: ...

    async def __aenter__(self) -> Self: ...

    async def __aexit__(self, *exc_info: object) -> None: ...

    async def commit(self) -> None: ...


@dataclass(frozen=True, slots=True)
class ClaimToken:
    """Which claim an outcome belongs to: the attempt number and when it started.
    (The attempt number alone repeats after a redrive resets it.)"""

    attempt: int
    started_at: datetime

    @classmethod
    def of(cls, job: Job) -> "ClaimToken":
        assert job.started_at is not None
        return cls(attempt=job.attempts, started_at=job.started_at)


class EventPublisher(Protocol):
    async def publish(self, event: IntegrationEvent) -> None:
        """Record the integration event for its consumers, in the current transaction.
        Raises UnknownEventError if the event catalog does not list it."""
        ...


class Inbox(Protocol):
    async def accept(self, consumer: str, message_id: str) -> bool:
        """Record that `consumer` took the message, in the current transaction.
        False if it already had: the message is a duplicate."""
        ...


PAUSE_SCOPES = ("queue", "type", "tenant")


@dataclass(frozen=True, slots=True)
class Pause:
    """An operator paused a queue, a job type or a tenant (`scope`), by name (`value`):
    none of its jobs starts until it is resumed (jobrail.dispatch.pauses)."""

    scope: str
    value: str
    paused_at: datetime


class PauseReader(Protocol):
    async def pause_of(self, job: Job) -> Pause | None:
        """A pause that holds `job` back (of its queue, type or tenant), if any."""
        ...


LINE_CAP = 10_000
"""A held job's place is counted up to this many jobs ahead of it: beyond, it is said
to be at least that far back (its cost stays bounded however long the line)."""


@dataclass(frozen=True, slots=True)
class LinePlace:
    """Where a held job stands in its tenant's line of its queue (jobrail.dispatch), and
    the figures the dispatcher writes for an estimate of when it starts."""

    ahead: int
    """The held jobs of its queue and tenant before it, in the order they are released
    (`rank_at`, then id), counted up to `LINE_CAP`."""
    capped: bool
    """More than `LINE_CAP` are ahead of it (`ahead` is then `LINE_CAP`)."""
    higher_ahead: int
    """Of those counted ahead, the jobs of a higher priority than its own."""
    weight: float
    """Its tenant's weight (1 by default): its share of the releases."""
    drain_per_s: float | None
    """Jobs a second the queue's workers took lately; None: not measured yet."""
    active_weight: float | None
    """The sum of the weights of the tenants with held jobs in the queue; None: not
    measured yet."""


class LinePlaces(Protocol):
    async def place_of(self, job: Job) -> LinePlace:
        """Where the held `job` stands in its line (as of its `rank_at`); one read."""
        ...
