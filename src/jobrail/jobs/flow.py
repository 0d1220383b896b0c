"""Batches and chains: jobs that run as one piece of work (a *flow*).

A **batch** is N member jobs that run side by side, with up to three callbacks, each
itself a job: ``then`` once every member succeeded, ``catch`` at the first member that
failed, ``finally`` once every member has ended, however. A **chain** is a sequence of
member jobs, each released when the one before it succeeds; a step that fails (or is
cancelled) stops the chain, and the steps after it are cancelled, saying why.

Every job of a flow is a row from the start. Those that must wait (a chain's later
steps, a batch's callbacks) are ``blocked`` and have no message: the transaction that
records the end of the member they wait for *releases* them (blocked → pending, and
their message into the outbox) or *stops* them (blocked → cancelled, with the reason).
That transaction also counts the member's end on the flow's row, which it locks first,
so that counts are exact whatever runs at once: a member's end is recorded once (its
record is fenced by its claim), and a callback is released at most once (only a
blocked job can be). So each callback runs once, with the same guarantee as any job.

This module is the flow's arithmetic: which end releases or stops what.
"""

import uuid
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum

from jobrail.jobs.domain import FlowRole, JobStatus
from jobrail.kernel.errors import ConflictError
from jobrail.kernel.ids import TenantId
from jobrail.kernel.keys import fitted_or_none

FlowId = uuid.UUID


class FlowKind(StrEnum):
    BATCH = "batch"
    CHAIN = "chain"


class FlowStatus(StrEnum):
    RUNNING = "running"
    """Some member has not ended yet."""
    SUCCEEDED = "succeeded"
    """Every member succeeded."""
    FAILED = "failed"
    """Every member has ended and at least one failed."""
    CANCELLED = "cancelled"
    """Every member has ended, none failed, and at least one was cancelled."""


@dataclass(frozen=True, slots=True)
class FlowEffects:
    """What one member's end does to the flow's other jobs."""

    release: tuple[FlowRole, ...] = ()
    """Callbacks to release."""
    stop: tuple[tuple[FlowRole, str], ...] = ()
    """Callbacks to cancel, with the reason."""
    release_step: int | None = None
    """A chain's next step to release."""
    stop_after: tuple[int, str] | None = None
    """A chain stopped: cancel its blocked steps after this one, with the reason."""


@dataclass(eq=False, slots=True)
class Flow:
    id: FlowId
    tenant_id: TenantId
    kind: FlowKind
    total: int
    created_at: datetime
    updated_at: datetime
    succeeded: int = 0
    failed: int = 0
    cancelled: int = 0
    status: FlowStatus = FlowStatus.RUNNING
    cancel_requested: bool = False
    finished_at: datetime | None = None
    idempotency_key: str | None = None
    name: str | None = None
    callbacks: dict[FlowRole, uuid.UUID] = field(default_factory=dict)
    """The callback jobs (a batch's then, catch and finally), by role."""

    def __post_init__(self) -> None:
        # Made from a caller's values, they may be longer than their columns.
        self.idempotency_key = fitted_or_none(self.idempotency_key)
        self.name = fitted_or_none(self.name)

    @property
    def ended(self) -> int:
        return self.succeeded + self.failed + self.cancelled

    @property
    def finished(self) -> bool:
        return self.status is not FlowStatus.RUNNING

    def member_ended(
        self, status: JobStatus, now: datetime, step: int | None = None
    ) -> FlowEffects:
        """Count a member's end (`status` terminal; `step`: a chain's step) and say what
        it releases or stops."""
        if not status.is_terminal:
            raise ValueError(f"a member ends succeeded, failed or cancelled, not {status.value}")
        if self.ended >= self.total:
            raise ConflictError(f"{self.kind.value} {self.id} has no member left to end")
        release: list[FlowRole] = []
        stop: list[tuple[FlowRole, str]] = []
        if status is JobStatus.SUCCEEDED:
            self.succeeded += 1
        elif status is JobStatus.FAILED:
            self.failed += 1
            if self.failed == 1:
                release.append(FlowRole.CATCH)
        else:
            self.cancelled += 1
        self.updated_at = now
        release_step: int | None = None
        stop_after: tuple[int, str] | None = None
        if self.kind is FlowKind.CHAIN and step is not None and self.ended < self.total:
            if status is JobStatus.SUCCEEDED:
                release_step = step + 1
            else:
                stop_after = (step, f"chain stopped: step {step} was {status.value}")
        if self.ended == self.total:
            self.finished_at = now
            if self.failed:
                self.status = FlowStatus.FAILED
            elif self.cancelled:
                self.status = FlowStatus.CANCELLED
            else:
                self.status = FlowStatus.SUCCEEDED
            release.append(FlowRole.FINALLY)
            if self.status is FlowStatus.SUCCEEDED:
                release.append(FlowRole.THEN)
            else:
                stop.append(
                    (
                        FlowRole.THEN,
                        f"not every job of the {self.kind.value} succeeded "
                        f"({self.failed} failed, {self.cancelled} cancelled)",
                    )
                )
            if not self.failed:
                stop.append((FlowRole.CATCH, f"no job of the {self.kind.value} failed"))
        return FlowEffects(tuple(release), tuple(stop), release_step, stop_after)

    def member_reopened(self, was: JobStatus, now: datetime) -> None:
        """A member that had ended runs again (a failed one redriven): it counts as not
        ended. Callbacks already released or stopped stay so; one still blocked is
        released when the flow ends again."""
        if was is JobStatus.FAILED and self.failed > 0:
            self.failed -= 1
        elif was is JobStatus.CANCELLED and self.cancelled > 0:
            self.cancelled -= 1
        elif was is JobStatus.SUCCEEDED and self.succeeded > 0:
            self.succeeded -= 1
        else:
            return
        self.status = FlowStatus.RUNNING
        self.finished_at = None
        self.updated_at = now

    def grow(self, count: int, now: datetime) -> None:
        """Add `count` members to a running batch."""
        if self.kind is not FlowKind.BATCH:
            raise ConflictError(f"jobs are added to batches only; {self.id} is a chain")
        if self.finished or self.cancel_requested:
            state = "cancelled" if self.cancel_requested else self.status.value
            raise ConflictError(f"batch {self.id} is {state}: it takes no more jobs")
        self.total += count
        self.updated_at = now

    def request_cancel(self, now: datetime) -> None:
        if self.finished:
            raise ConflictError(f"{self.kind.value} {self.id} has already {self.status.value}")
        self.cancel_requested = True
        self.updated_at = now


@dataclass(frozen=True, slots=True)
class FlowCounts:
    """A flow's members by state, as the jobs table has them now (`pending` counts the
    members waiting to run: pending, retrying, and a chain's blocked steps)."""

    total: int
    pending: int
    running: int
    succeeded: int
    failed: int
    cancelled: int

    @classmethod
    def of(cls, by_status: dict[JobStatus, int]) -> "FlowCounts":
        waiting = (JobStatus.PENDING, JobStatus.RETRYING, JobStatus.BLOCKED)
        return cls(
            total=sum(by_status.values()),
            pending=sum(by_status.get(s, 0) for s in waiting),
            running=by_status.get(JobStatus.RUNNING, 0),
            succeeded=by_status.get(JobStatus.SUCCEEDED, 0),
            failed=by_status.get(JobStatus.FAILED, 0),
            cancelled=by_status.get(JobStatus.CANCELLED, 0),
        )
