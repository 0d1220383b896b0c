"""The job event feed's reads (the rows are written by triggers, see tables.job_events)."""

import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Select, case, delete, func, literal, or_, select, text, tuple_
from sqlalchemy.engine import RowMapping
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, AsyncSession

from jobrail.events.feed import FOLDED, START, EventCursor, EventFilter, JobEvent, StoryLine
from jobrail.jobs.domain import JobStatus, Wait
from jobrail.kernel.ids import JobId, TenantId
from jobrail.store.engine import reading
from jobrail.store.errors import database_errors
from jobrail.store.mapping import progress_from_document
from jobrail.store.tables import job_events

# Postgres: the oldest transaction still open. A transaction at or after it may still
# commit events, so only those of older ones are read (the feed never gains a row behind
# a cursor it gave out). Read-only transactions have no id and hold nothing back; a
# long-open writing transaction anywhere on the server delays the feed until it ends.
_PG_HORIZON = "pg_snapshot_xmin(pg_current_snapshot())::text::bigint"
_LAST_ID = 2**63 - 1


class SqlaJobEventLog:
    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine
        self._pg = engine.dialect.name == "postgresql"

    async def read(self, which: EventFilter, limit: int) -> Sequence[JobEvent]:
        with database_errors():
            async with reading(self._engine) as connection:
                return await self.read_on(connection, which, limit)

    async def head(self) -> EventCursor:
        with database_errors():
            async with reading(self._engine) as connection:
                return await self.head_on(connection)

    async def tip(self) -> EventCursor:
        t = job_events
        # The (tx, id) index read backwards from the horizon: one row.
        query = select(t.c.tx, t.c.id).order_by(t.c.tx.desc(), t.c.id.desc()).limit(1)
        if self._pg:
            query = query.where(t.c.tx < text(_PG_HORIZON))
        with database_errors():
            async with reading(self._engine) as connection:
                last = (await connection.execute(query)).first()
        return START if last is None else EventCursor(int(last.tx), int(last.id))

    async def of_job(self, job_id: JobId, limit: int) -> list[JobEvent]:
        # The newest by id, served by ix_job_events_job_id without sorting all of a
        # job's events (progress reports make many); then put in feed order.
        t = job_events
        query = select(t).where(t.c.job_id == job_id).order_by(t.c.id.desc()).limit(limit)
        with database_errors():
            async with reading(self._engine) as connection:
                rows = (await connection.execute(query)).mappings().all()
        return sorted((_event(row) for row in rows), key=lambda event: event.cursor)

    async def story(
        self, which: EventFilter, limit: int, *, held_back_too: bool = False
    ) -> list[StoryLine]:
        # Folded by the database with window functions over the job's events in id order
        # (by ix_job_events_job_id, without a sort), which is their feed order: a job's
        # event never has a smaller `tx` than the one before (tables.job_events). Each
        # event is numbered and knows the next one's name; a progress event followed by
        # another progress event is left out, and the one that ends a run stands for the
        # events since the last other one. The reads stop at `limit` lines.
        assert which.job_id is not None, "a story is one job's"
        t = job_events
        events = select(
            t,
            func.row_number().over(order_by=t.c.id).label("n"),
            func.lead(t.c.name).over(order_by=t.c.id).label("next_name"),
        ).where(
            t.c.job_id == which.job_id,
            tuple_(t.c.tx, t.c.id) > tuple_(literal(which.after.tx), literal(which.after.id)),
        )
        if self._pg and not held_back_too:
            events = events.where(t.c.tx < text(_PG_HORIZON))
        if which.tenant_id is not None:
            events = events.where(t.c.tenant_id == which.tenant_id)
        numbered = events.subquery("numbered")
        last_other = func.max(case((numbered.c.name != FOLDED, numbered.c.n), else_=0)).over(
            order_by=numbered.c.id, rows=(None, 0)
        )
        runs = select(numbered, last_other.label("last_other")).subquery("runs")
        query = (
            select(runs)
            .where(
                or_(
                    runs.c.name != FOLDED,
                    runs.c.next_name.is_(None),
                    runs.c.next_name != FOLDED,
                )
            )
            .order_by(runs.c.id)
            .limit(limit)
        )
        with database_errors():
            async with reading(self._engine) as connection:
                rows = (await connection.execute(query)).mappings().all()
        return [
            StoryLine(
                _event(row),
                row["n"] - row["last_other"] if row["name"] == FOLDED else None,
            )
            for row in rows
        ]

    async def read_on(
        self, connection: AsyncConnection | AsyncSession, which: EventFilter, limit: int
    ) -> list[JobEvent]:
        """`read` on a connection (or session) the caller has open, in its transaction
        (on SQLite every transaction holds the write lock: a second would wait for it)."""
        t = job_events
        query: Select[Any] = (
            select(t)
            .where(
                tuple_(t.c.tx, t.c.id) > tuple_(literal(which.after.tx), literal(which.after.id))
            )
            .order_by(t.c.tx, t.c.id)
            .limit(limit)
        )
        if self._pg:
            query = query.where(t.c.tx < text(_PG_HORIZON))
        if which.tenant_id is not None:
            query = query.where(t.c.tenant_id == which.tenant_id)
        if which.job_id is not None:
            query = query.where(t.c.job_id == which.job_id)
        if which.job_type is not None:
            query = query.where(t.c.job_type == which.job_type)
        if which.since is not None:
            query = query.where(t.c.at >= which.since)
        rows = (await connection.execute(query)).mappings().all()
        return [_event(row) for row in rows]

    async def head_on(self, connection: AsyncConnection | AsyncSession) -> EventCursor:
        if self._pg:
            horizon = (await connection.execute(text(f"SELECT {_PG_HORIZON}"))).scalar_one()
            return EventCursor(int(horizon) - 1, _LAST_ID)
        last = (await connection.execute(select(func.max(job_events.c.id)))).scalar()
        return EventCursor(0, int(last or 0))

    async def delete_before(self, cutoff: datetime, batch: int) -> int:
        """Delete up to `batch` of the oldest events, those that happened before
        `cutoff`. Events are read oldest first by the (tx, id) index, so no index on
        their time is kept: the batch stops at the first younger one, and fewer than
        `batch` deleted ends the pruning."""
        t = job_events
        with database_errors():
            async with self._engine.begin() as connection:
                oldest = (
                    await connection.execute(
                        select(t.c.id, t.c.at).order_by(t.c.tx, t.c.id).limit(batch)
                    )
                ).all()
                ids = []
                for id_, at in oldest:
                    if at >= cutoff:
                        break
                    ids.append(id_)
                if ids:
                    await connection.execute(delete(t).where(t.c.id.in_(ids)))
        return len(ids)


def _moment(value: Any) -> datetime | None:
    if value is None:
        return None
    moment = datetime.fromisoformat(value) if isinstance(value, str) else value
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def _event(row: RowMapping) -> JobEvent:
    data: dict[str, Any] = row["data"]
    flow_id = data.get("flow_id")
    return JobEvent(
        cursor=EventCursor(row["tx"], row["id"]),
        name=row["name"],
        tenant_id=TenantId(row["tenant_id"]),
        job_id=JobId(row["job_id"]),
        job_type=row["job_type"],
        at=row["at"],
        status=JobStatus(data["status"]),
        attempts=int(data["attempts"]),
        last_error=data.get("last_error"),
        run_after=_moment(data.get("run_after")),
        progress=progress_from_document(data.get("progress")),
        waiting=Wait.from_json(data.get("waiting")),
        flow_id=uuid.UUID(str(flow_id)) if flow_id else None,
    )
