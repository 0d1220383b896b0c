"""The jobs table: the repository used by use cases and the store used by workers."""

import uuid
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import and_, insert, or_, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from jobrail.jobs.domain import DUE_TOLERANCE, Job
from jobrail.jobs.messages import Outgoing
from jobrail.jobs.ports import CancelFilter, ClaimToken, Cursor, JobFilter, JobPage
from jobrail.jobs.progress import JobProgress
from jobrail.kernel.errors import ConflictError
from jobrail.kernel.ids import JobId, TenantId
from jobrail.store import json_codec
from jobrail.store import queries as q
from jobrail.store.debounce import debounced, refused_by_cap
from jobrail.store.dialects import insert_or_existing, note_arrival, queued_cap, through_gate
from jobrail.store.errors import database_errors
from jobrail.store.mapping import job_from_row, job_row, job_state, progress_document
from jobrail.store.outbox_rows import insert_outbox_rows
from jobrail.store.platform_schema import qualified
from jobrail.store.tables import flows, jobs
from jobrail.transport.codec import Envelope, encode
from jobrail.worker.job_store import ClaimResult, JobIdentity, WaitNote


class SqlaJobRepository:
    """`schema`: the platform's schema, for a session whose connections do not put it on
    their search path (a host's own, see persistence.platform_schema)."""

    def __init__(self, session: AsyncSession, schema: str | None = None) -> None:
        self._session = session
        self._options = qualified(schema)
        self._created: list[str] = []

    async def add(self, job: Job) -> Job:
        if job.debounce_key is not None:
            return await self._debounce(job)
        if (
            job.held_since is not None
            and job.is_due(job.created_at)  # the fast path is for jobs due now alone
            and await through_gate(self._session, job.queue, self._options)
        ):
            job.held_since = None  # no backlog in its queue: it goes out at the commit
        with database_errors():
            existing = await insert_or_existing(
                self._session,
                jobs,
                job_row(job),
                self._options,
                "a job",
                other=flows,
                holder=None if job.unique_key is None else _unique_holder(job),
                capped=job.capped,
            )
        if existing is not None:
            return job_from_row(existing)
        if job.held_since is not None:
            await note_arrival(self._session, job, self._options)
        self._created.append(job.type)
        return job

    async def _debounce(self, job: Job) -> Job:
        """The job added, or the pending job of its debounce key, which took its payload."""
        dialect = self._session.get_bind().dialect.name
        with database_errors():
            capped = {"cap_tenant_id": job.tenant_id if job.capped else None}
            result = await self._session.execute(
                debounced(dialect), {**job_row(job), **capped}, execution_options=self._options
            )
            row = result.mappings().first()
            if row is None:
                cap = await self._session.scalar(
                    select(queued_cap(job.tenant_id)), execution_options=self._options
                )
                refused_by_cap(job.tenant_id, cap)
        if row["id"] == job.id:
            self._created.append(job.type)
        return job_from_row(row)

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
        query = select(jobs)
        if where.tenant_id is not None:
            query = query.where(jobs.c.tenant_id == where.tenant_id)
        if where.queue is not None:
            query = query.where(jobs.c.queue == where.queue)
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

    async def to_cancel(self, where: CancelFilter, limit: int) -> Sequence[JobId]:
        statuses = [status.value for status in where.statuses]
        query = select(jobs.c.id).where(
            jobs.c.status.in_(statuses), jobs.c.cancel_requested.is_(False)
        )
        if where.tenant_id is not None:
            query = query.where(jobs.c.tenant_id == where.tenant_id)
        if where.type is not None:
            query = query.where(jobs.c.type == where.type)
        if where.entity_id is not None:
            query = query.where(jobs.c.entity_id == where.entity_id)
        if where.created_before is not None:
            query = query.where(jobs.c.created_at < where.created_before)
        query = query.order_by(jobs.c.created_at, jobs.c.id).limit(limit)
        with database_errors():
            result = await self._session.execute(query, execution_options=self._options)
        return [JobId(job_id) for job_id in result.scalars()]

    async def save(self, job: Job) -> None:
        with database_errors():
            try:
                await self._session.execute(
                    update(jobs).where(jobs.c.id == job.id).values(job_state(job)),
                    execution_options=self._options,
                )
            except IntegrityError:
                if job.unique_key is None and job.debounce_key is None:
                    raise
                # Run again (a redrive) while a newer job holds its key.
                key = job.unique_key or job.debounce_key
                raise ConflictError(
                    f"job {job.id} cannot be pending again while another job of its type "
                    f"holds its key {key!r}: wait for that one to end"
                ) from None

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
                update(jobs).where(q.held(_holding(job.id, claim))).values(state),
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
                q.SAVE_HELD_MANY,
                {
                    "job_id": [job.id for job in jobs_],
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


def _holding(job_id: JobId, claim: ClaimToken) -> dict[str, Any]:
    """The parameters of queries.held: the attempt of `claim` still holds the job."""
    return {"job_id": job_id, "claimed_attempt": claim.attempt, "claimed_at": claim.started_at}


def _unique_holder(job: Job) -> Any:
    """The active job of `job`'s tenant, type and unique key."""
    return q.BY_UNIQUE.params(tenant_id=job.tenant_id, type=job.type, unique_key=job.unique_key)


class SqlaJobStore:
    """Each method is one short transaction of its own: a worker never holds a
    transaction open while a job runs. Its statements are queries.py's, as the
    Postgres store's are."""

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine

    async def get(self, job_id: JobId) -> Job | None:
        with database_errors():
            async with self._engine.connect() as conn:
                row = (await conn.execute(q.GET, {"job_id": job_id})).mappings().first()
        return job_from_row(row) if row else None

    async def expire(self, job_id: JobId, now: datetime) -> Job | None:
        with database_errors():
            async with self._engine.begin() as conn:
                expiring = {"job_id": job_id, "now": now}
                row = (await conn.execute(q.EXPIRE, expiring)).mappings().first()
        return job_from_row(row) if row else None

    async def claim(
        self, job_id: JobId, now: datetime, lease: timedelta, expect: JobIdentity | None = None
    ) -> ClaimResult:
        claiming = {
            "job_id": job_id,
            "now": now,
            "lease_until": now + lease,
            "due_by": now + DUE_TOLERANCE,
            "expect_tenant_id": expect.tenant_id if expect else None,
            "expect_job_type": expect.job_type if expect else None,
        }
        with database_errors():
            async with self._engine.begin() as conn:
                row = (await conn.execute(q.CLAIM, claiming)).mappings().first()
                if row is not None:
                    return ClaimResult(job=job_from_row(row))
                current = (await conn.execute(q.GET, {"job_id": job_id})).mappings().first()
        return ClaimResult(job=None, current=job_from_row(current) if current else None)

    async def record(self, job: Job, claim: ClaimToken, outbox: Sequence[Outgoing]) -> bool:
        state = job_state(job)
        recording = {**_holding(job.id, claim), **{name: state[name] for name in q.RECORDED}}
        with database_errors():
            async with self._engine.begin() as conn:
                if (await conn.execute(q.RECORD, recording)).first() is None:
                    return False
                if outbox:
                    await insert_outbox_rows(
                        conn, [encode(message) for message in outbox], job.updated_at
                    )
        return True

    async def extend_lease(self, job_id: JobId, claim: ClaimToken, until: datetime) -> bool:
        extending = {**_holding(job_id, claim), "lease_until": until}
        with database_errors():
            async with self._engine.begin() as conn:
                written = (await conn.execute(q.EXTEND_LEASE, extending)).first()
        return written is not None

    async def cancel_requested(self, job_id: JobId) -> bool:
        with database_errors():
            async with self._engine.connect() as conn:
                value = await conn.scalar(q.CANCEL_REQUESTED, {"job_id": job_id})
        return bool(value)

    async def flow_members(self, flow_id: uuid.UUID) -> list[Job]:
        with database_errors():
            async with self._engine.connect() as conn:
                rows = (await conn.execute(q.FLOW_MEMBERS, {"flow_id": flow_id})).mappings().all()
        return [job_from_row(row) for row in rows]

    async def note_waits(self, notes: Sequence[WaitNote]) -> None:
        if not notes:
            return
        rows = [{"job_id": n.job_id, "at": n.at, "waiting": n.wait.as_json()} for n in notes]
        with database_errors():
            async with self._engine.begin() as conn:
                await conn.execute(q.NOTE_WAIT, rows)

    async def write_progress(self, job_id: JobId, claim: ClaimToken, progress: JobProgress) -> bool:
        writing = {**_holding(job_id, claim), "progress": progress_document(progress)}
        with database_errors():
            async with self._engine.begin() as conn:
                written = (await conn.execute(q.WRITE_PROGRESS, writing)).first()
        return written is not None


class SqlaJobIntake:
    """A job and its encoded message in one transaction (the Postgres store does it in
    one statement): the store under ``outbox.committing.RecordingIntake``."""

    def __init__(self, sessionmaker: async_sessionmaker[AsyncSession]) -> None:
        self._sessionmaker = sessionmaker

    async def add(self, job: Job, envelope: Envelope) -> Job:
        async with self._sessionmaker() as session:
            stored = await SqlaJobRepository(session).add(job)
            with database_errors():
                if stored.id == job.id and stored.held_since is None:
                    await insert_outbox_rows(session, [envelope], job.created_at)
                await session.commit()  # a debounced add may have changed the pending job
        return stored
