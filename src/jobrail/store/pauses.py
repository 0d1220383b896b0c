"""The pauses of fair dispatch (``dispatch_pauses``, see jobrail.dispatch.pauses): each
paused queue, job type or tenant, the recall of its jobs released but not started, and
the arrival notes a resume writes for the dispatchers."""

from datetime import datetime

from sqlalchemy import and_, delete, func, or_, select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from jobrail.jobs.domain import Job
from jobrail.jobs.ports import Pause
from jobrail.store.dialects import hold_gates, upsert_insert
from jobrail.store.errors import database_errors
from jobrail.store.tables import HELD, dispatch_arrivals, dispatch_gates, dispatch_pauses, jobs

_SCOPE_COLUMNS = {"queue": jobs.c.queue, "type": jobs.c.type, "tenant": jobs.c.tenant_id}


class SqlaPauses:
    """The pauses (``dispatch_pauses``): each paused queue, job type or tenant, and the
    recall of its jobs released but not started."""

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine

    async def pause(self, scope: str, value: str, now: datetime) -> tuple[Pause, int]:
        """Pause, and hold again the jobs of the scope that wait with a message (their
        messages find them held and are dropped; the dispatcher releases them after the
        resume, in fair order): the pause (the earlier one, if it was paused already)
        and how many jobs were held again."""
        p, column = dispatch_pauses, _SCOPE_COLUMNS[scope]
        with database_errors():
            async with self._engine.begin() as conn:
                await hold_gates(conn, alone=True)
                await conn.execute(
                    upsert_insert(self._engine.dialect.name, p)
                    .values(scope=scope, value=value, paused_at=now)
                    .on_conflict_do_nothing()
                )
                paused_at = (
                    await conn.execute(
                        select(p.c.paused_at).where(p.c.scope == scope, p.c.value == value)
                    )
                ).scalar_one()
                # No fast path from now on: the dispatchers give none while anything is
                # paused, but one given before would let a paused job's enqueue go out
                # (and one being written now waits for this pause: hold_gates).
                g = dispatch_gates
                await conn.execute(update(g).where(g.c.credit > 0).values(credit=0))
                recalled = await conn.execute(
                    update(jobs)
                    .where(
                        column == value,
                        jobs.c.held_since.is_(None),
                        jobs.c.status.in_(["pending", "retrying"]),
                    )
                    .values(
                        held_since=now,
                        rank_at=func.coalesce(jobs.c.rank_at, jobs.c.run_after, jobs.c.created_at),
                    )
                    .returning(jobs.c.id)
                )
                count = len(recalled.all())
        return Pause(scope, value, paused_at), count

    async def resume(self, scope: str, value: str) -> bool:
        """Resume: False if it was not paused. The tenants with held jobs of the scope are
        noted for the dispatchers, which release them at their next pass."""
        p, column = dispatch_pauses, _SCOPE_COLUMNS[scope]
        with database_errors():
            async with self._engine.begin() as conn:
                gone = await conn.execute(
                    delete(p).where(p.c.scope == scope, p.c.value == value).returning(p.c.scope)
                )
                if gone.first() is None:
                    return False
                line = (jobs.c.queue, jobs.c.tenant_id, jobs.c.fair_key)
                waiting = (
                    select(*line)
                    .where(column == value, HELD)
                    .distinct()
                    .order_by(*line)  # as the enqueues note them
                )
                await conn.execute(
                    upsert_insert(self._engine.dialect.name, dispatch_arrivals)
                    .from_select(["queue", "tenant_id", "fair_key"], waiting)
                    .on_conflict_do_nothing()
                )
        return True

    async def pauses(self) -> list[Pause]:
        p = dispatch_pauses
        with database_errors():
            async with self._engine.connect() as conn:
                rows = await conn.execute(select(p).order_by(p.c.paused_at, p.c.scope, p.c.value))
        return [Pause(row.scope, row.value, row.paused_at) for row in rows]

    async def pause_of(self, job: Job) -> Pause | None:
        p = dispatch_pauses
        mine = or_(
            *(
                and_(p.c.scope == scope, p.c.value == value)
                for scope, value in (
                    ("queue", job.queue),
                    ("type", job.type),
                    ("tenant", job.tenant_id),
                )
            )
        )
        with database_errors():
            async with self._engine.connect() as conn:
                row = (await conn.execute(select(p).where(mine).order_by(p.c.paused_at))).first()
        return None if row is None else Pause(row.scope, row.value, row.paused_at)
