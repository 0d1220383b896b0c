"""The jobs table: the repository used by use cases and the store used by workers."""

import uuid
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import and_, bindparam, insert, or_, select, text, true, update
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from jobrail.jobs.domain import (
    CLAIMABLE_STATUSES,
    DUE_TOLERANCE,
    FlowRole,
    Job,
    JobProgress,
    JobStatus,
)
from jobrail.jobs.messages import Outgoing
from jobrail.jobs.ports import ClaimToken, Cursor, JobFilter, JobPage
from jobrail.kernel.ids import JobId, TenantId
from jobrail.store import json_codec
from jobrail.store.dialects import insert_or_existing
from jobrail.store.errors import database_errors
from jobrail.store.mapping import job_from_row, job_row, job_state, progress_document
from jobrail.store.outbox_rows import insert_outbox_rows
from jobrail.store.platform_schema import qualified
from jobrail.store.tables import flows, jobs
from jobrail.transport.codec import Envelope, encode
from jobrail.worker.job_store import ClaimResult, JobIdentity, WaitNote

_CLAIMABLE = [status.value for status in CLAIMABLE_STATUSES]


class SqlaJobRepository:
    """`schema`: the platform's schema, for a session whose connections do not put it on
    their search path (a host's own, see persistence.platform_schema)."""

    def __init__(self, session: AsyncSession, schema: str | None = None) -> None:
        self._session = session
        self._options = qualified(schema)
        self._created: list[str] = []

    async def add(self, job: Job) -> Job:
        with database_errors():
            existing = await insert_or_existing(
                self._session, jobs, job_row(job), self._options, "a job", other=flows
            )
        if existing is not None:
            return job_from_row(existing)
        self._created.append(job.type)
        return job

    async def get(
        self, job_id: JobId, tenant_id: TenantId | None = None, *, for_update: bool = False
    ) -> Job | None:
        query = select(jobs).where(jobs.c.id == job_id)
        if tenant_id is not None:
            query = query.where(jobs.c.tenant_id == tenant_id)
        if for_update:
            query = query.with_for_update()
        with database_errors():
            row = (
                (await self._session.execute(query, execution_options=self._options))
                .mappings()
                .first()
            )
        return job_from_row(row) if row else None

    async def list(self, where: JobFilter, limit: int, after: Cursor | None) -> JobPage:
        query = select(jobs).where(jobs.c.tenant_id == where.tenant_id)
        if where.status is not None:
            query = query.where(jobs.c.status == where.status.value)
        if where.type is not None:
            query = query.where(jobs.c.type == where.type)
        if where.entity_id is not None:
            query = query.where(jobs.c.entity_id == where.entity_id)
        if after is not None:
            query = query.where(
                or_(
                    jobs.c.created_at < after.created_at,
                    and_(jobs.c.created_at == after.created_at, jobs.c.id < after.job_id),
                )
            )
        query = query.order_by(jobs.c.created_at.desc(), jobs.c.id.desc()).limit(limit + 1)
        with database_errors():
            rows = (
                (await self._session.execute(query, execution_options=self._options))
                .mappings()
                .all()
            )
        items = [job_from_row(row) for row in rows[:limit]]
        next_cursor = None
        if len(rows) > limit:
            last = items[-1]
            next_cursor = Cursor(created_at=last.created_at, job_id=last.id)
        return JobPage(items=items, next_cursor=next_cursor)

    async def save(self, job: Job) -> None:
        with database_errors():
            await self._session.execute(
                update(jobs).where(jobs.c.id == job.id).values(job_state(job)),
                execution_options=self._options,
            )

    async def add_new(self, new: Sequence[Job]) -> None:
        if not new:
            return
        assert all(job.idempotency_key is None for job in new)
        with database_errors():
            await self._session.execute(
                insert(jobs), [job_row(job) for job in new], execution_options=self._options
            )
        self._created.extend(job.type for job in new)

    def take_created(self) -> Sequence[str]:
        created, self._created = self._created, []
        return created

    async def save_held(self, job: Job, claim: ClaimToken) -> bool:
        state = job_state(job)
        del state["cancel_requested"]  # as SqlaJobStore.record
        with database_errors():
            result = await self._session.execute(
                update(jobs).where(*_held_by(job.id, claim)).values(state),
                execution_options=self._options,
            )
        return bool(result.rowcount == 1)  # type: ignore[attr-defined]

    async def save_held_many(self, held: Sequence[tuple[Job, ClaimToken]]) -> Sequence[bool]:
        """`save_held` for each, in one statement on Postgres (a flow's member ends of
        one loop turn, see jobrail.worker.flow_recording); whether each was written."""
        if len(held) < 2 or self._options or self._session.get_bind().dialect.name != "postgresql":
            return [await self.save_held(job, claim) for job, claim in held]
        jobs_ = [job for job, _ in held]
        with database_errors():
            rows = await self._session.execute(
                _SAVE_HELD_MANY,
                {
                    "id": [job.id for job in jobs_],
                    "claimed_attempt": [claim.attempt for _, claim in held],
                    "claimed_at": [claim.started_at for _, claim in held],
                    "status": [job.status.value for job in jobs_],
                    "attempts": [job.attempts for job in jobs_],
                    "last_error": [job.last_error for job in jobs_],
                    "result": [
                        None if job.result is None else json_codec.dumps(job.result)
                        for job in jobs_
                    ],
                    "updated_at": [job.updated_at for job in jobs_],
                    "started_at": [job.started_at for job in jobs_],
                    "finished_at": [job.finished_at for job in jobs_],
                    "run_after": [job.run_after for job in jobs_],
                    "lease_until": [job.lease_until for job in jobs_],
                    "waiting": [
                        None if job.waiting is None else json_codec.dumps(job.waiting.as_json())
                        for job in jobs_
                    ],
                },
            )
        written = {row[0] for row in rows}
        return [job.id in written for job in jobs_]


# save_held for many jobs at once (Postgres): as the worker's RECORD_MANY (persistence.pg),
# in the session's transaction, with `waiting` too.
_SAVE_HELD_MANY = text("""
UPDATE jobs
   SET status = r.status, attempts = r.attempts, last_error = r.last_error,
       result = r.result, updated_at = r.updated_at, started_at = r.started_at,
       finished_at = r.finished_at, run_after = r.run_after, lease_until = r.lease_until,
       waiting = r.waiting
  FROM unnest(CAST(:id AS uuid[]), CAST(:claimed_attempt AS int[]),
              CAST(:claimed_at AS timestamptz[]), CAST(:status AS text[]),
              CAST(:attempts AS int[]), CAST(:last_error AS text[]),
              CAST(:result AS jsonb[]), CAST(:updated_at AS timestamptz[]),
              CAST(:started_at AS timestamptz[]), CAST(:finished_at AS timestamptz[]),
              CAST(:run_after AS timestamptz[]), CAST(:lease_until AS timestamptz[]),
              CAST(:waiting AS jsonb[]))
       AS r(id, claimed_attempt, claimed_at, status, attempts, last_error, result,
            updated_at, started_at, finished_at, run_after, lease_until, waiting)
 WHERE jobs.id = r.id AND jobs.status = 'running'
   AND jobs.attempts = r.claimed_attempt AND jobs.started_at = r.claimed_at
RETURNING jobs.id
""")


def _held_by(job_id: JobId, claim: ClaimToken) -> tuple[Any, ...]:
    """The job is still running the attempt of `claim` (a write of that attempt's)."""
    return (
        jobs.c.id == job_id,
        jobs.c.status == JobStatus.RUNNING.value,
        jobs.c.attempts == claim.attempt,
        jobs.c.started_at == claim.started_at,
    )


class SqlaJobStore:
    """Each method is one short transaction of its own: a worker never holds a
    transaction open while a job runs."""

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine

    async def get(self, job_id: JobId) -> Job | None:
        with database_errors():
            async with self._engine.connect() as conn:
                row = (
                    (await conn.execute(select(jobs).where(jobs.c.id == job_id))).mappings().first()
                )
        return job_from_row(row) if row else None

    async def claim(
        self, job_id: JobId, now: datetime, lease: timedelta, expect: JobIdentity | None = None
    ) -> ClaimResult:
        # Mirrors Job.can_start and Job.is_due, as one conditional update, so that two
        # workers holding the same message cannot both start the job.
        claimable = and_(
            jobs.c.status.in_(_CLAIMABLE),
            or_(jobs.c.run_after.is_(None), jobs.c.run_after <= now + DUE_TOLERANCE),
        )
        # `now` is the claiming worker's clock, as is the lease_until the holder wrote:
        # workers' clocks must agree to within the renewal margin (see jobs.runner).
        abandoned = and_(jobs.c.status == JobStatus.RUNNING.value, jobs.c.lease_until <= now)
        owned = (
            and_(jobs.c.tenant_id == expect.tenant_id, jobs.c.type == expect.job_type)
            if expect
            else true()
        )
        statement = (
            update(jobs)
            .where(jobs.c.id == job_id, or_(claimable, abandoned), owned)
            .values(
                status=JobStatus.RUNNING.value,
                attempts=jobs.c.attempts + 1,
                started_at=now,
                updated_at=now,
                lease_until=now + lease,
                run_after=None,
                waiting=None,
            )
            .returning(*jobs.c)
        )
        with database_errors():
            async with self._engine.begin() as conn:
                row = (await conn.execute(statement)).mappings().first()
                if row is not None:
                    return ClaimResult(job=job_from_row(row))
                current = (
                    (await conn.execute(select(jobs).where(jobs.c.id == job_id))).mappings().first()
                )
        return ClaimResult(job=None, current=job_from_row(current) if current else None)

    async def record(self, job: Job, claim: ClaimToken, outbox: Sequence[Outgoing]) -> bool:
        state = job_state(job)
        # cancel_requested belongs to whoever asked to cancel; the worker only reads it.
        del state["cancel_requested"]
        statement = update(jobs).where(*_held_by(job.id, claim)).values(state)
        with database_errors():
            async with self._engine.begin() as conn:
                result = await conn.execute(statement)
                if result.rowcount == 0:
                    return False
                if outbox:
                    await insert_outbox_rows(
                        conn, [encode(message) for message in outbox], job.updated_at
                    )
        return True

    async def extend_lease(self, job_id: JobId, claim: ClaimToken, until: datetime) -> bool:
        statement = update(jobs).where(*_held_by(job_id, claim)).values(lease_until=until)
        with database_errors():
            async with self._engine.begin() as conn:
                result = await conn.execute(statement)
        return bool(result.rowcount == 1)

    async def cancel_requested(self, job_id: JobId) -> bool:
        with database_errors():
            async with self._engine.connect() as conn:
                value = await conn.scalar(
                    select(jobs.c.cancel_requested).where(jobs.c.id == job_id)
                )
        return bool(value)

    async def flow_members(self, flow_id: uuid.UUID) -> list[Job]:
        query = (
            select(jobs)
            .where(jobs.c.flow_id == flow_id, jobs.c.flow_role == FlowRole.MEMBER.value)
            .order_by(jobs.c.flow_step, jobs.c.created_at, jobs.c.id)
        )
        with database_errors():
            async with self._engine.connect() as conn:
                rows = (await conn.execute(query)).mappings().all()
        return [job_from_row(row) for row in rows]

    async def note_waits(self, notes: Sequence[WaitNote]) -> None:
        if not notes:
            return
        statement = (
            update(jobs)
            .where(
                jobs.c.id == bindparam("note_id"),
                # Spelled out: an IN list cannot be executed many times in one call.
                or_(*(jobs.c.status == status for status in _CLAIMABLE)),
                jobs.c.updated_at <= bindparam("note_at"),
            )
            .values(waiting=bindparam("note_waiting"))
        )
        rows = [
            {"note_id": n.job_id, "note_at": n.at, "note_waiting": n.wait.as_json()} for n in notes
        ]
        with database_errors():
            async with self._engine.begin() as conn:
                await conn.execute(statement, rows)

    async def write_progress(self, job_id: JobId, claim: ClaimToken, progress: JobProgress) -> bool:
        statement = (
            update(jobs)
            .where(*_held_by(job_id, claim))
            .values(progress=progress_document(progress))
        )
        with database_errors():
            async with self._engine.begin() as conn:
                result = await conn.execute(statement)
        return bool(result.rowcount == 1)


class SqlaJobIntake:
    """A job and its encoded message in one transaction (the Postgres store does it in
    one statement): the store under ``outbox.committing.RecordingIntake``."""

    def __init__(self, sessionmaker: async_sessionmaker[AsyncSession]) -> None:
        self._sessionmaker = sessionmaker

    async def add(self, job: Job, envelope: Envelope) -> Job:
        async with self._sessionmaker() as session:
            stored = await SqlaJobRepository(session).add(job)
            if stored.id == job.id:
                with database_errors():
                    await insert_outbox_rows(session, [envelope], job.created_at)
                    await session.commit()
        return stored
