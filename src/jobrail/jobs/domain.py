"""The job aggregate: what a job is and which state changes are legal.

    blocked ──release──► pending      (a later step of a chain, a batch's callback)
    pending ──start──► running ──succeed──► succeeded
       ▲                 │  ├──retry_later──► retrying ──start──► running
       │                 │  ├──fail──► failed ──redrive──► pending
       │                 │  └──cancelled (at a checkpoint, after cancel was requested)
    pending | retrying | blocked ──cancel──► cancelled
    pending | retrying ──expire──► expired   (its deadline passed before it could start)

A running job whose lease has ended (its worker died) may be started again: the
new start is a takeover and counts as an attempt.
"""

import uuid
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from jobrail.jobs.priority import Priority
from jobrail.jobs.progress import JobProgress
from jobrail.kernel.errors import ConflictError, InvalidInputError
from jobrail.kernel.ids import JobId, TenantId
from jobrail.kernel.keys import fitted_or_none


class JobStatus(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    RETRYING = "retrying"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    BLOCKED = "blocked"
    """Waits for other jobs to end (its chain's step before it, its batch's members);
    it has no message until they release it (jobrail.jobs.flow)."""
    EXPIRED = "expired"
    """Its deadline passed before an attempt could start: it never ran (again)."""

    @property
    def is_terminal(self) -> bool:
        return self in TERMINAL_STATUSES


TERMINAL_STATUSES = frozenset(
    {JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED, JobStatus.EXPIRED}
)
CLAIMABLE_STATUSES = frozenset({JobStatus.PENDING, JobStatus.RETRYING})
# A job in one of these may be cancelled at once (none of its attempts is running).
IDLE_STATUSES = CLAIMABLE_STATUSES | {JobStatus.BLOCKED}

MAX_ERROR_LENGTH = 2000
EXPIRED_ERROR = "not started by its deadline"

# A job deferred to a time may start this much before it (timers and clocks differ).
DUE_TOLERANCE = timedelta(milliseconds=10)


class IllegalTransitionError(ConflictError):
    def __init__(self, job: "Job", action: str) -> None:
        super().__init__(f"cannot {action} job {job.id}: it is {job.status.value}")
        self.job_id = job.id
        self.status = job.status
        self.action = action


class RetriesExhaustedError(ConflictError):
    def __init__(self, job: "Job") -> None:
        super().__init__(f"job {job.id} has used {job.attempts} of {job.max_attempts} attempts")


@dataclass(frozen=True, slots=True)
class WaitsOn:
    """One thing a deferred job waits for: a limit or its lock, by kind (``rate_limit``,
    ``concurrency``, ``lock``; ``limits_store`` while the limits cannot be asked), the
    name its job type gave it, and its key for this job."""

    kind: str
    name: str
    key: str
    held_by: str | None = None  # a lock's: the id of the job holding it, when a job does


@dataclass(frozen=True, slots=True)
class Wait:
    """Why a job that is due has not started: what turned it away at its last try
    (`on`), when it tries again (`until`), and since when it has been waiting (its first
    deferral since it last ran)."""

    on: tuple[WaitsOn, ...]
    until: datetime
    since: datetime

    def as_json(self) -> dict[str, Any]:
        return {
            "on": [{k: v for k, v in asdict(w).items() if v is not None} for w in self.on],
            "until": self.until.isoformat(),
            "since": self.since.isoformat(),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any] | None) -> "Wait | None":
        if not data:
            return None
        return cls(
            on=tuple(WaitsOn(w["kind"], w["name"], w["key"], w.get("held_by")) for w in data["on"]),
            until=datetime.fromisoformat(data["until"]),
            since=datetime.fromisoformat(data["since"]),
        )


class FlowRole(StrEnum):
    """A job's part in its batch or chain."""

    MEMBER = "member"
    """One of a batch's jobs, or one step of a chain: counted in the flow's totals."""
    THEN = "then"
    """A batch's callback once every member succeeded."""
    CATCH = "catch"
    """A batch's callback at its first failed member."""
    FINALLY = "finally"
    """A batch's callback once every member has ended, however."""


@dataclass(frozen=True, slots=True)
class FlowLink:
    """Which batch or chain (a flow, jobrail.jobs.flow) a job belongs to, as what, and
    for a chain's step, its place (0 first)."""

    flow_id: uuid.UUID
    role: FlowRole
    step: int | None = None


def _clip(error: str) -> str:
    error = error.replace("\x00", "")  # Postgres text cannot hold NUL
    return error if len(error) <= MAX_ERROR_LENGTH else error[: MAX_ERROR_LENGTH - 1] + "…"


@dataclass(eq=False, slots=True)
class Job:
    id: JobId
    type: str
    queue: str
    tenant_id: TenantId
    payload: dict[str, Any]
    max_attempts: int
    created_at: datetime
    updated_at: datetime
    status: JobStatus = JobStatus.PENDING
    attempts: int = 0
    entity_id: str | None = None
    idempotency_key: str | None = None
    last_error: str | None = None
    result: dict[str, Any] | None = None
    trace_context: dict[str, str] = field(default_factory=dict)
    started_at: datetime | None = None
    finished_at: datetime | None = None
    run_after: datetime | None = None
    lease_until: datetime | None = None
    cancel_requested: bool = False
    deadline: datetime | None = None
    """No attempt starts at or after it: a job still waiting then ends expired."""
    unique_key: str | None = None
    """While the job is active, an enqueue of its tenant and type with this key returns it."""
    debounce_key: str | None = None
    """While the job is pending, another enqueue of its tenant and type with this key
    replaces its payload: it runs once, when its window closes, with the last."""
    priority: Priority = Priority.NORMAL
    """Its place among its tenant's jobs under fair dispatch (jobrail.jobs.priority)."""
    held_since: datetime | None = None
    """Since when it waits, with no message, for the dispatcher to release it (fair
    dispatch, jobrail.dispatch); None once released, or if it was never held."""
    rank_at: datetime | None = None
    """Its place in its tenant's line while it is held: earlier goes first."""
    fair_key: str = ""
    """Its line inside its tenant's share (its type's `fair_key` over its payload)."""
    capped: bool = False
    """Its enqueue is refused while its tenant is at its cap (how it is added: not stored)."""
    waiting: Wait | None = None
    """What the job waits for while its limits defer it (None once it starts)."""
    progress: JobProgress | None = None
    """The latest progress an attempt reported (kept across attempts until a new one
    reports; written by the attempt, never by a state change)."""
    flow: FlowLink | None = None
    """The batch or chain the job belongs to, and its part in it."""

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Job) and other.id == self.id

    def __hash__(self) -> int:
        return hash(self.id)

    @classmethod
    def create(
        cls,
        *,
        id: JobId,
        type: str,
        queue: str,
        tenant_id: TenantId,
        payload: dict[str, Any],
        max_attempts: int,
        now: datetime,
        entity_id: str | None = None,
        idempotency_key: str | None = None,
        run_after: datetime | None = None,
        trace_context: dict[str, str] | None = None,
        flow: FlowLink | None = None,
        blocked: bool = False,
        deadline: datetime | None = None,
        unique_key: str | None = None,
        debounce_key: str | None = None,
        capped: bool = False,
        priority: Priority = Priority.NORMAL,
        fair_key: str = "",
    ) -> "Job":
        if max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        due = now if run_after is None else max(run_after, now)
        if deadline is not None and deadline <= due:
            raise InvalidInputError(
                f"deadline {deadline.isoformat()} is not after the job may start "
                f"({due.isoformat()})"
            )
        return cls(
            id=id,
            type=type,
            queue=queue,
            tenant_id=tenant_id,
            payload=payload,
            max_attempts=max_attempts,
            created_at=now,
            updated_at=now,
            # Made from a caller's values, they may be longer than their columns.
            entity_id=fitted_or_none(entity_id),
            idempotency_key=fitted_or_none(idempotency_key),
            run_after=run_after,
            trace_context=dict(trace_context or {}),
            flow=flow,
            status=JobStatus.BLOCKED if blocked else JobStatus.PENDING,
            deadline=deadline,
            unique_key=fitted_or_none(unique_key),
            debounce_key=fitted_or_none(debounce_key),
            capped=capped,
            priority=priority,
            fair_key=fitted_or_none(fair_key) or "",
        )

    def hold(self, rank_at: datetime | None = None) -> None:
        """Wait, from its enqueue, for the dispatcher to release it (jobrail.dispatch): in
        its tenant's line at `rank_at` (jobrail.jobs.priority.LineRules; by default, when
        it is due)."""
        if self.status is not JobStatus.PENDING or self.attempts:
            raise IllegalTransitionError(self, "hold")
        self.held_since = self.created_at
        self.rank_at = rank_at or self.run_after or self.created_at

    @property
    def is_held(self) -> bool:
        """It waits for the dispatcher (pending or retrying, not released yet)."""
        return self.held_since is not None and self.status in CLAIMABLE_STATUSES

    def can_start(self, now: datetime) -> bool:
        if self.past_deadline(now):
            return False
        if self.status in CLAIMABLE_STATUSES:
            return self.held_since is None and self.is_due(now)
        return self.status is JobStatus.RUNNING and self.lease_expired(now)

    def past_deadline(self, now: datetime) -> bool:
        return self.deadline is not None and self.deadline <= now

    def can_expire(self, now: datetime) -> bool:
        """Its deadline has passed while it waits to start (pending or retrying), or
        while a worker that died held it: no attempt of it may start any more."""
        if not self.past_deadline(now):
            return False
        if self.status in CLAIMABLE_STATUSES:
            return True
        return self.status is JobStatus.RUNNING and self.lease_expired(now)

    def expire(self, now: datetime) -> None:
        """The deadline passed before an attempt could start: the job ends, never run."""
        if not self.can_expire(now):
            raise IllegalTransitionError(self, "expire")
        self.status = JobStatus.EXPIRED
        self.last_error = EXPIRED_ERROR
        self.run_after = None
        self._finish(now)

    def lease_expired(self, now: datetime) -> bool:
        return self.lease_until is not None and self.lease_until <= now

    def is_due(self, now: datetime) -> bool:
        return self.run_after is None or self.run_after <= now + DUE_TOLERANCE

    def start(self, now: datetime, lease: timedelta) -> None:
        """Claim the job for one attempt that may last until `now + lease`."""
        if not self.can_start(now):
            raise IllegalTransitionError(self, "start")
        self.status = JobStatus.RUNNING
        self.attempts += 1
        self.started_at = now
        self.updated_at = now
        self.lease_until = now + lease
        self.run_after = None
        self.waiting = None

    def succeed(self, result: dict[str, Any] | None, now: datetime) -> None:
        self._require(JobStatus.RUNNING, "succeed")
        self.status = JobStatus.SUCCEEDED
        self.result = result
        self.last_error = None
        self._finish(now)

    @property
    def has_attempts_left(self) -> bool:
        return self.attempts < self.max_attempts

    def retry_later(self, error: str, run_after: datetime, now: datetime) -> None:
        self._require(JobStatus.RUNNING, "retry")
        if not self.has_attempts_left:
            raise RetriesExhaustedError(self)
        self.status = JobStatus.RETRYING
        self.last_error = _clip(error)
        self.run_after = run_after
        self.lease_until = None
        self.updated_at = now

    def throttled(self, error: str, run_after: datetime, now: datetime) -> None:
        """The attempt was turned away by someone else's rate limit: wait and try
        again, giving the attempt back."""
        self._require(JobStatus.RUNNING, "throttle")
        self.attempts -= 1
        self.status = JobStatus.RETRYING
        self.last_error = _clip(error)
        self.run_after = run_after
        self.lease_until = None
        self.updated_at = now

    def fail(self, error: str, now: datetime) -> None:
        self._require(JobStatus.RUNNING, "fail")
        self.status = JobStatus.FAILED
        self.last_error = _clip(error)
        self._finish(now)

    def release(self, now: datetime) -> None:
        """What a blocked job waited for has happened: it may run (a message follows)."""
        self._require(JobStatus.BLOCKED, "release")
        self.status = JobStatus.PENDING
        self.updated_at = now

    def stop_blocked(self, reason: str, now: datetime) -> None:
        """What a blocked job waited for will never happen: it is cancelled, saying why."""
        self._require(JobStatus.BLOCKED, "stop")
        self.status = JobStatus.CANCELLED
        self.last_error = _clip(reason)
        self._finish(now)

    def cancel(self, now: datetime) -> None:
        """Cancel now if the job has not started; otherwise ask the running attempt to stop."""
        if self.status in IDLE_STATUSES:
            self.status = JobStatus.CANCELLED
            self.run_after = None
            self._finish(now)
        elif self.status is JobStatus.RUNNING:
            self.cancel_requested = True
            self.updated_at = now
        else:
            raise IllegalTransitionError(self, "cancel")

    def stop_cancelled(self, now: datetime) -> None:
        """The running attempt saw, at a checkpoint, that cancel was requested."""
        self._require(JobStatus.RUNNING, "stop")
        self.cancel_requested = True
        self.status = JobStatus.CANCELLED
        self._finish(now)

    def redrive(self, now: datetime) -> None:
        """Give a failed job a fresh set of attempts."""
        self._require(JobStatus.FAILED, "redrive")
        self.status = JobStatus.PENDING
        self.attempts = 0
        self.cancel_requested = False
        self.started_at = None
        self.finished_at = None
        self.run_after = None
        self.updated_at = now

    def _finish(self, now: datetime) -> None:
        self.finished_at = now
        self.updated_at = now
        self.lease_until = None
        self.waiting = None

    def _require(self, status: JobStatus, action: str) -> None:
        if self.status is not status:
            raise IllegalTransitionError(self, action)
