"""Ports of enqueueing: the command EnqueueJob takes and its result, what the application
knows of a job type (the catalog), the intake that stores a job with its message and
the unit of work it runs in, the count of enqueued jobs, and the job queue a module's
use cases enqueue through. Adapters live in store/, outbox/ and telemetry/.
"""

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol, Self

from jobrail.jobs.domain import Job
from jobrail.jobs.messages import JobMessage
from jobrail.jobs.priority import Priority
from jobrail.kernel.errors import InvalidInputError
from jobrail.kernel.ids import TenantId


class ValidatedPayload(Protocol):
    """A payload already validated as its job type's model (a pydantic model of exactly
    that class, e.g. a route's parsed body): it is stored as it dumps, not checked again."""

    def model_dump(self, *, mode: str) -> dict[str, Any]: ...


MAX_DEBOUNCE_S = 24 * 3600.0


@dataclass(frozen=True, slots=True)
class Debounce:
    """Enqueues of a tenant's type with `key` within `window_s` of the first collapse
    into one job, which starts when the window closes with the last payload. Once it
    has started, the next enqueue opens a new window."""

    key: str
    window_s: float

    def __post_init__(self) -> None:
        if not isinstance(self.key, str) or not self.key.strip() or not self.key.isprintable():
            raise _refused("debounce_key", "a debounce key is printable text, not blank")
        window = self.window_s
        if isinstance(window, bool) or not isinstance(window, int | float):
            raise _refused("debounce_s", "a debounce window is a number of seconds")
        if not 0 < window <= MAX_DEBOUNCE_S:  # NaN too
            raise _refused(
                "debounce_s",
                f"a debounce window is more than 0 and at most {MAX_DEBOUNCE_S:g} seconds",
            )


def _refused(option: str, message: str) -> InvalidInputError:
    return InvalidInputError(
        message, details=[{"loc": [option], "msg": message, "type": "value_error"}]
    )


@dataclass(frozen=True, slots=True)
class EnqueueJobCommand:
    tenant_id: TenantId
    type: str
    payload: Mapping[str, Any] | ValidatedPayload
    idempotency_key: str | None = None
    entity_id: str | None = None
    run_after: datetime | None = None
    deadline: datetime | None = None
    unique_key: str | None = None
    debounce: "Debounce | None" = None
    priority: Priority | None = None
    """Its place among the tenant's jobs under fair dispatch; None: its type's default."""
    capped: bool = True
    """Refused at the tenant's cap on its waiting jobs (a tenant's own enqueue); False
    for what jobrail enqueues on its behalf: webhook deliveries, event consumers."""
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


class JobQueue(Protocol):
    async def enqueue(self, cmd: EnqueueJobCommand) -> EnqueueResult:
        """Record a job and its message in the current transaction (EnqueueJob's rules)."""
        ...


class EnqueueCounter(Protocol):
    """Told of every job that was enqueued (and committed), by job type (metrics)."""

    def enqueued(self, job_type: str) -> None: ...


class JobType(Protocol):
    """What the application knows of a job type, resolved once per enqueue: its queue,
    its attempts, how its payload is checked and its limit keys filled in."""

    @property
    def name(self) -> str: ...

    @property
    def queue(self) -> str: ...

    @property
    def max_attempts(self) -> int | None: ...

    @property
    def open_to_tenants(self) -> bool:
        """Whether a tenant may enqueue it by its name (``POST /jobs``)."""
        ...

    @property
    def priority(self) -> Priority:
        """Its jobs' priority when an enqueue gives none."""
        ...

    def validate_payload(self, payload: Mapping[str, Any] | ValidatedPayload) -> dict[str, Any]:
        """The payload as it will be stored; raise InvalidInputError if it does not fit."""
        ...

    def limit_keys(self, payload: Mapping[str, Any], tenant_id: str) -> list[str] | None:
        """The keys of the job's limits and lock, filled in (None if it declares none).
        They travel in the message, so a worker need not read the job to gate it."""
        ...

    def fair_key_of(self, payload: Mapping[str, Any], tenant_id: str) -> str:
        """The job's line inside its tenant's share under fair dispatch ("" for one)."""
        ...


class JobCatalog(Protocol):
    def get(self, name: str) -> JobType | None: ...
