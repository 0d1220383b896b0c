"""The worker's job store on Postgres (see JobStore): get, claim, record, lease
extension, cancel requests, flow members, wait notes and progress, each one statement
(``store/pg_queries.py``) and one round trip on the asyncpg pool (``store/pg_pool.py``).
"""

import json
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, TypeVar

import asyncpg

from jobrail.jobs.domain import CLAIMABLE_STATUSES, DUE_TOLERANCE, Job
from jobrail.jobs.messages import Outgoing
from jobrail.jobs.ports import ClaimToken
from jobrail.jobs.progress import JobProgress
from jobrail.kernel.batching import Coalescer
from jobrail.kernel.ids import JobId
from jobrail.store.mapping import job_from_row, progress_document
from jobrail.store.pg_pool import _Pg
from jobrail.store.pg_queries import (
    CANCEL_REQUESTED,
    CLAIM,
    CLAIM_MANY,
    EXPIRE,
    EXTEND_LEASE,
    FLOW_MEMBERS,
    GET,
    GET_SETTLED,
    NOTE_WAITS,
    RECORD,
    RECORD_MANY,
    WRITE_PROGRESS,
    WRITE_PROGRESS_MANY,
)
from jobrail.transport.codec import encode
from jobrail.worker.job_store import ClaimResult, JobIdentity, WaitNote

T = TypeVar("T")


def in_id_order(items: Sequence[T], job_id: Callable[[T], JobId]) -> list[T]:
    """`items` in their jobs' id order. A statement over many jobs (unnest joined to the
    primary key, as on any jobs table of size) locks their rows in the order it is sent
    them: sent in one order, two such statements over the same jobs wait for each other
    rather than deadlock. Stable: a job asked for twice keeps its askers' order."""
    return sorted(items, key=job_id)


def _outbox_args(outgoing: Sequence[Outgoing], at: datetime) -> list[Any]:
    messages = [encode(message) for message in outgoing]
    return [
        [m.id for m in messages],
        [m.queue for m in messages],
        [m.body for m in messages],
        [dict(m.headers) for m in messages],
        [m.not_before for m in messages],
        [at for _ in messages],
    ]


@dataclass(frozen=True, slots=True)
class _Claim:
    job_id: JobId
    now: datetime
    lease_until: datetime
    due_by: datetime
    expect: JobIdentity | None


class PgJobStore(_Pg):
    """The worker's job store (see JobStore): one statement per call, and claims,
    records and progress writes made in the same loop turn share one statement."""

    def __init__(self, pool: asyncpg.Pool, window_s: float = 0.0) -> None:
        super().__init__(pool)
        self._claims: Coalescer[_Claim, Job | None] = Coalescer(self._claim_many, window_s)
        self._records: Coalescer[tuple[Job, ClaimToken], bool] = Coalescer(
            self._record_many, window_s
        )
        self._progress: Coalescer[tuple[JobId, ClaimToken, JobProgress], bool] = Coalescer(
            self._write_progress_many, window_s
        )

    async def get(self, job_id: JobId) -> Job | None:
        row = await self._fetchrow(GET, job_id)
        return job_from_row(row) if row else None

    async def claim(
        self, job_id: JobId, now: datetime, lease: timedelta, expect: JobIdentity | None = None
    ) -> ClaimResult:
        claim = _Claim(job_id, now, now + lease, now + DUE_TOLERANCE, expect)
        job = await self._claims.submit(claim)
        if job is not None:
            return ClaimResult(job=job)
        # A dispatcher publishes a release's messages before it commits the release
        # (jobrail.dispatch.use_cases): this one may have come first. Its claim saw the
        # job held and passed it by (a conditional update waits only for a row its
        # condition matched). Wait for that transaction's end if it is still open, and
        # try again if it released the job; the release may also have committed since
        # the claim, before the read. Still held: it rolled back, or a pause held it.
        waited_from = time.monotonic()
        current = await self.get(job_id)
        if current is not None and current.is_held:
            current = await self._settled(job_id)
        # The lease runs from now, not from before the wait.
        later = now + timedelta(seconds=time.monotonic() - waited_from)
        if (
            current is not None
            and current.status in CLAIMABLE_STATUSES
            and current.can_start(later)
        ):
            claim = _Claim(job_id, later, later + lease, later + DUE_TOLERANCE, expect)
            job = await self._claims.submit(claim)
            if job is not None:
                return ClaimResult(job=job)
            current = await self.get(job_id)
        return ClaimResult(job=None, current=current)

    async def _settled(self, job_id: JobId) -> Job | None:
        row = await self._fetchrow(GET_SETTLED, job_id)
        return job_from_row(row) if row else None

    async def _claim_many(self, claims: Sequence[_Claim]) -> list[Job | None]:
        if len(claims) == 1:
            c = claims[0]
            row = await self._fetchrow(
                CLAIM,
                c.job_id,
                c.now,
                c.lease_until,
                c.due_by,
                c.expect.tenant_id if c.expect else None,
                c.expect.job_type if c.expect else None,
            )
            return [job_from_row(row) if row else None]
        claims_ = in_id_order(claims, lambda c: c.job_id)
        rows = await self._fetch(
            CLAIM_MANY,
            [c.job_id for c in claims_],
            [c.now for c in claims_],
            [c.lease_until for c in claims_],
            [c.due_by for c in claims_],
            [c.expect.tenant_id if c.expect else None for c in claims_],
            [c.expect.job_type if c.expect else None for c in claims_],
        )
        claimed = {row["id"]: job_from_row(row) for row in rows}
        # A job asked for twice in one turn is claimed once: the first asker gets it.
        return [claimed.pop(c.job_id, None) for c in claims]

    async def expire(self, job_id: JobId, now: datetime) -> Job | None:
        row = await self._fetchrow(EXPIRE, job_id, now)
        return job_from_row(row) if row else None

    async def record(self, job: Job, claim: ClaimToken, outbox: Sequence[Outgoing]) -> bool:
        if not outbox:
            return await self._records.submit((job, claim))
        return await self._record_one(job, claim, outbox)

    async def _record_one(self, job: Job, claim: ClaimToken, outbox: Sequence[Outgoing]) -> bool:
        row = await self._fetchrow(
            RECORD,
            job.id,
            claim.attempt,
            job.status.value,
            job.attempts,
            job.last_error,
            job.result,
            job.updated_at,
            job.started_at,
            job.finished_at,
            job.run_after,
            job.lease_until,
            *_outbox_args(outbox, job.updated_at),
            claim.started_at,
        )
        return bool(row and row[0])

    async def _record_many(self, records: Sequence[tuple[Job, ClaimToken]]) -> list[bool]:
        if len(records) == 1:
            return [await self._record_one(*records[0], ())]
        records_ = in_id_order(records, lambda r: r[0].id)
        jobs_ = [job for job, _ in records_]
        rows = await self._fetch(
            RECORD_MANY,
            [job.id for job in jobs_],
            [claim.attempt for _, claim in records_],
            [claim.started_at for _, claim in records_],
            [job.status.value for job in jobs_],
            [job.attempts for job in jobs_],
            [job.last_error for job in jobs_],
            [job.result for job in jobs_],
            [job.updated_at for job in jobs_],
            [job.started_at for job in jobs_],
            [job.finished_at for job in jobs_],
            [job.run_after for job in jobs_],
            [job.lease_until for job in jobs_],
        )
        written = {row["id"] for row in rows}
        return [job.id in written for job, _ in records]

    async def extend_lease(self, job_id: JobId, claim: ClaimToken, until: datetime) -> bool:
        row = await self._fetchrow(EXTEND_LEASE, job_id, claim.attempt, claim.started_at, until)
        return row is not None

    async def cancel_requested(self, job_id: JobId) -> bool:
        row = await self._fetchrow(CANCEL_REQUESTED, job_id)
        return bool(row and row[0])

    async def flow_members(self, flow_id: uuid.UUID) -> list[Job]:
        return [job_from_row(row) for row in await self._fetch(FLOW_MEMBERS, flow_id)]

    async def note_waits(self, notes: Sequence[WaitNote]) -> None:
        if notes:
            notes = in_id_order(notes, lambda n: n.job_id)
            await self._execute(
                NOTE_WAITS,
                [n.job_id for n in notes],
                [json.dumps(n.wait.as_json()) for n in notes],
                [n.at for n in notes],
            )

    async def write_progress(self, job_id: JobId, claim: ClaimToken, progress: JobProgress) -> bool:
        return await self._progress.submit((job_id, claim, progress))

    async def _write_progress_many(
        self, writes: Sequence[tuple[JobId, ClaimToken, JobProgress]]
    ) -> list[bool]:
        if len(writes) == 1:
            job_id, claim, progress = writes[0]
            row = await self._fetchrow(
                WRITE_PROGRESS, job_id, claim.attempt, claim.started_at, progress_document(progress)
            )
            return [row is not None]
        ordered = in_id_order(writes, lambda w: w[0])
        rows = await self._fetch(
            WRITE_PROGRESS_MANY,
            [job_id for job_id, _, _ in ordered],
            [claim.attempt for _, claim, _ in ordered],
            [claim.started_at for _, claim, _ in ordered],
            [progress_document(progress) for _, _, progress in ordered],
        )
        written = {row["id"] for row in rows}
        return [job_id in written for job_id, _, _ in writes]
