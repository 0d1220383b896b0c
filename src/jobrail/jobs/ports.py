"""Ports of the jobs application layer. Adapters live in store/, outbox/ and transport/."""

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Protocol, Self

from jobrail.jobs.domain import FlowRole, Job, JobProgress, JobStatus, Wait
from jobrail.jobs.flow import Flow, FlowId
from jobrail.jobs.messages import DeadLetter, JobMessage, Outgoing
from jobrail.kernel.events import IntegrationEvent
from jobrail.kernel.ids import JobId, TenantId


@dataclass(frozen=True, slots=True)
class JobFilter:
    tenant_id: TenantId
    status: JobStatus | None = None
    type: str | None = None
    entity_id: str | None = None


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


class ValidatedPayload(Protocol):
    """A payload already validated as its job type's model (a pydantic model of exactly
    that class, e.g. a route's parsed body): it is stored as it dumps, not checked again."""

    def model_dump(self, *, mode: str) -> dict[str, Any]: ...


@dataclass(frozen=True, slots=True)
class EnqueueJobCommand:
    tenant_id: TenantId
    type: str
    payload: Mapping[str, Any] | ValidatedPayload
    idempotency_key: str | None = None
    entity_id: str | None = None
    run_after: datetime | None = None
    trace_context: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class EnqueueResult:
    job: Job
    created: bool


class JobIntake(Protocol):
    async def add(self, job: Job, message: JobMessage) -> Job:
        """Store a new job and its message atomically. If its tenant already has a job
        with its idempotency key, store nothing and return that job instead."""
        ...


class EnqueueUnitOfWork(Protocol):
    """A transaction EnqueueJob records jobs in. `intake` adds a job and its message to
    it; `commit` makes them durable and then, in one place (AfterCommit), hands the new
    messages to the outbox's fast path and counts the new jobs. Nothing leaves, and
    nothing is counted, unless it commits."""

    @property
    def intake(self) -> JobIntake: ...

    async def __aenter__(self) -> Self: ...

    async def __aexit__(self, *exc_info: object) -> None: ...

    async def commit(self) -> None: ...


class OutboxMarks(Protocol):
    async def mark_published(self, ids: Sequence[Any], at: datetime) -> None: ...


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


@dataclass(frozen=True, slots=True)
class JobIdentity:
    """What a message says about the job it names, besides its id. A claim succeeds
    only if the job agrees: a message that names another tenant's job (forged, or
    corrupted) never runs it."""

    tenant_id: str
    job_type: str


@dataclass(frozen=True, slots=True)
class ClaimResult:
    """`job` is set when the claim succeeded; otherwise `current` is the job as it is
    (None if there is no such job)."""

    job: Job | None
    current: Job | None = None


@dataclass(frozen=True, slots=True)
class WaitNote:
    """What a deferred job waits for, as the limits said at `at`."""

    job_id: JobId
    wait: Wait
    at: datetime


class JobStore(Protocol):
    """The worker's short transactions on the jobs table."""

    async def get(self, job_id: JobId) -> Job | None:
        """The job as it is, without claiming it."""
        ...

    async def claim(
        self, job_id: JobId, now: datetime, lease: timedelta, expect: JobIdentity | None = None
    ) -> ClaimResult:
        """Start the job if it is claimable and due (see `Job.can_start`) and, with
        `expect`, of that tenant and type, atomically."""
        ...

    async def record(self, job: Job, claim: ClaimToken, outbox: Sequence[Outgoing]) -> bool:
        """Write the outcome of an attempt and its messages in one transaction, only if
        the job is still running that claim. False when another worker took it over."""
        ...

    async def extend_lease(self, job_id: JobId, claim: ClaimToken, until: datetime) -> bool:
        """Move the lease of a running job to `until`, only if it is still running that
        claim. False when it is not (another worker took it over, or it ended)."""
        ...

    async def cancel_requested(self, job_id: JobId) -> bool: ...

    async def note_waits(self, notes: Sequence[WaitNote]) -> None:
        """Write what each job waits for, in one statement, on jobs still pending or
        retrying that have not changed since the note was made (a job that started
        meanwhile keeps no note)."""
        ...

    async def write_progress(self, job_id: JobId, claim: ClaimToken, progress: JobProgress) -> bool:
        """Store the progress of a running job, only if it is still running that claim.
        False when it is not (another worker took it over, or it ended)."""
        ...

    async def flow_members(self, flow_id: FlowId) -> list[Job]:
        """The members of a batch or chain, in the order they were made."""
        ...


@dataclass(frozen=True, slots=True)
class QueueDepth:
    queue: str
    """The logical name (``jobs.default``, ``jobs.dlq``)."""
    ready: int
    consumers: int


class QueueStats(Protocol):
    async def queue_depths(self) -> list[QueueDepth]:
        """Messages ready and consumers of every work queue and of the dead-letter
        queue; raises BrokerUnavailableError when the broker cannot be asked."""
        ...


@dataclass(frozen=True, slots=True)
class JobCount:
    type: str
    status: JobStatus
    count: int


class OpsReadModel(Protocol):
    """Platform-wide reads for operators (every tenant at once)."""

    async def job_counts(self) -> list[JobCount]:
        """Jobs by type and status."""
        ...

    async def recent_failures(self, limit: int) -> list[Job]:
        """Failed jobs, the most recently finished first."""
        ...

    async def oldest_unpublished(self) -> datetime | None:
        """When the oldest outbox row still waiting to be published was written."""
        ...

    async def recent_flows(self, limit: int) -> list[tuple[Flow, dict[JobStatus, int]]]:
        """Batches and chains, the most recently created first, each with its members by
        status (as FlowRepository.counts has them)."""
        ...


class DeadLetterQueue(Protocol):
    """The dead-letter queue, for operators: look at it, and take messages out of it."""

    @property
    def safe_to_scan(self) -> bool:
        """Whether going through the dead letters can never drop one. Each letter looked
        at and given back counts as a delivery on a quorum queue; only a DLQ declared
        with its explicit delivery limit (or one that counts none) never drops for that.
        False for an older DLQ kept without it, and before the DLQ was declared."""
        ...

    async def peek_dead_letters(self, limit: int) -> list[DeadLetter]:
        """Up to `limit` dead letters, oldest first, left where they are."""
        ...

    async def settle_dead_letters(
        self, decide: Callable[[DeadLetter], Awaitable[bool]], limit: int
    ) -> None:
        """Go through up to `limit` dead letters, oldest first: each for which
        `decide` returns True leaves the queue, the others stay."""
        ...

    async def purge_dead_letters(self) -> int:
        """Delete every dead letter waiting in the queue; return how many went."""
        ...


class Publisher(Protocol):
    async def publish(self, message: Outgoing) -> None:
        """Publish and wait for the broker's confirmation; raise BrokerUnavailableError."""
        ...


class JobQueue(Protocol):
    async def enqueue(self, cmd: EnqueueJobCommand) -> EnqueueResult:
        """Record a job and its message in the current transaction (EnqueueJob's rules)."""
        ...


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


class EnqueueCounter(Protocol):
    """Told of every job that was enqueued (and committed), by job type (metrics)."""

    def enqueued(self, job_type: str) -> None: ...


class OutboxDispatcher(Protocol):
    async def dispatch(self, messages: Sequence[Outgoing]) -> None:
        """Publish just-committed outbox messages and mark them published. Never raises:
        whatever it cannot publish now, the relay publishes later."""
        ...

    async def dispatch_each(self, commits: Sequence[Sequence[Outgoing]]) -> None:
        """`dispatch` for the messages of several commits at once: the commits side by
        side, each one's messages in order (as separate `dispatch` calls would). Never
        raises."""
        ...


@dataclass(frozen=True, slots=True)
class JobType:
    """What the application needs to know about a job type to enqueue it."""

    name: str
    queue: str
    max_attempts: int | None
    description: str = ""


class JobCatalog(Protocol):
    def get(self, name: str) -> JobType | None: ...

    def validate_payload(
        self, name: str, payload: Mapping[str, Any] | ValidatedPayload
    ) -> dict[str, Any]:
        """The payload as it will be stored; raise InvalidInputError if it does not fit."""
        ...

    def limit_keys(self, name: str, payload: Mapping[str, Any], tenant_id: str) -> list[str] | None:
        """The keys of the job's limits and lock, filled in (None if it declares none).
        They travel in the message, so a worker need not read the job to gate it."""
        ...
