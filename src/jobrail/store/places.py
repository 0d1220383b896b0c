"""Where a held job stands in its line (jobrail.jobs.ports.LinePlaces), for
``GET /jobs/{id}``: one statement, on Postgres and SQLite alike.

A line in a queue is a tenant's held jobs of one fair key (its type's, '' for none) in
the order the dispatcher releases them, (`rank_at`, id), the order of
``ix_jobs_held_lines`` (jobrail.store.dispatch). The jobs ahead
of one are counted on that index, backwards from its own place, and no further than
`LINE_CAP` (plus one, to tell "more"): the read costs at most that many index entries
however long the line, and nothing else of ``jobs`` is read. Paused jobs ahead (of a
paused type) are counted too, though the job may pass them: excluding them would cost
a look at the pauses per job ahead.

The queue's figures (`dispatch_queues.drain_per_s`, `active_weight`, written by the
dispatcher) and the tenant's weight come with it, as scalar subqueries on primary keys.
"""

from typing import Any

from sqlalchemy import (
    ColumnElement,
    Integer,
    ScalarSelect,
    Select,
    SmallInteger,
    Text,
    bindparam,
    case,
    func,
    select,
    tuple_,
)
from sqlalchemy.ext.asyncio import AsyncEngine

from jobrail.jobs.domain import Job
from jobrail.jobs.ports import LINE_CAP, LinePlace
from jobrail.store.errors import database_errors
from jobrail.store.tables import HELD, UtcDateTime, dispatch_queues, jobs, tenants

_queue = bindparam("queue", type_=Text())
_tenant = bindparam("tenant_id", type_=Text())


def _place(cap: int) -> Select[Any]:
    mine = tuple_(bindparam("rank_at", type_=UtcDateTime()), bindparam("id", type_=jobs.c.id.type))
    ahead = (
        select(jobs.c.priority)
        .where(
            jobs.c.queue == _queue,
            jobs.c.tenant_id == _tenant,
            jobs.c.fair_key == bindparam("fair_key", type_=Text()),
            HELD,
            tuple_(jobs.c.rank_at, jobs.c.id) < mine,
        )
        .order_by(jobs.c.rank_at.desc(), jobs.c.id.desc())
        .limit(cap + 1)
        .subquery("ahead")
    )
    higher = case((ahead.c.priority > bindparam("priority", type_=SmallInteger()), 1), else_=0)
    q = dispatch_queues

    def of_queue(column: ColumnElement[Any]) -> ScalarSelect[Any]:
        return select(column).where(q.c.queue == _queue).scalar_subquery()

    return select(
        func.count().label("ahead"),
        func.coalesce(func.sum(higher), 0).cast(Integer()).label("higher"),
        of_queue(q.c.drain_per_s).label("drain_per_s"),
        of_queue(q.c.active_weight).label("active_weight"),
        select(tenants.c.weight).where(tenants.c.id == _tenant).scalar_subquery().label("weight"),
    ).select_from(ahead)


class SqlaLinePlaces:
    def __init__(self, engine: AsyncEngine, cap: int = LINE_CAP) -> None:
        self._engine = engine
        self._cap = cap
        self._statement = _place(cap)

    async def place_of(self, job: Job) -> LinePlace:
        values = {
            "queue": job.queue,
            "tenant_id": job.tenant_id,
            "fair_key": job.fair_key,
            "rank_at": job.rank_at,
            "id": job.id,
            "priority": int(job.priority),
        }
        with database_errors():
            async with self._engine.connect() as conn:
                row = (await conn.execute(self._statement, values)).one()
        weight = row.weight
        return LinePlace(
            ahead=min(row.ahead, self._cap),
            capped=row.ahead > self._cap,
            higher_ahead=int(row.higher),
            weight=1.0 if weight is None else float(weight),
            drain_per_s=None if row.drain_per_s is None else float(row.drain_per_s),
            active_weight=None if row.active_weight is None else float(row.active_weight),
        )
