"""The worker's port to the jobs table: its short transactions (claim, record, lease
extension, progress, wait notes) and the values they pass. Adapters: the asyncpg store
(``store/pg_job_store.py``) and the SQLAlchemy one (``store/jobs.py``).

``ClaimToken`` stays with the jobs' unit of work (``jobs/ports.py``), whose repository
writes an attempt's outcome under a claim too.
"""

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol

from jobrail.jobs.domain import Job, Wait
from jobrail.jobs.flow import FlowId
from jobrail.jobs.messages import Outgoing
from jobrail.jobs.ports import ClaimToken
from jobrail.jobs.progress import JobProgress
from jobrail.kernel.ids import JobId


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

    async def expire(self, job_id: JobId, now: datetime) -> Job | None:
        """End the job expired if it may (see `Job.can_expire`), atomically: the job
        expired, or None if it may not (it ended, started, or its deadline is ahead)."""
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
