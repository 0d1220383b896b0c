"""The dispatcher's statements (jobrail.dispatch): a queue's lease, the tenants with
held jobs, the heads of their lines, and the release, on Postgres and SQLite alike.

A pass is one transaction (``SqlaDispatchStore.turn``). It takes the queue's row in
``dispatch_queues`` first, with ``FOR UPDATE SKIP LOCKED`` on Postgres: two processes'
passes over one queue never overlap, and one that finds the row taken does nothing
rather than wait. The release is a conditional UPDATE (still held, still waiting,
before its deadline), so a job released by a pass that another process's pass
overlapped (a lease taken over) is released once.
"""

import contextlib
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import (
    ARRAY,
    Boolean,
    Integer,
    Text,
    bindparam,
    cast,
    column,
    delete,
    exists,
    func,
    literal,
    literal_column,
    null,
    or_,
    select,
    true,
    union_all,
    update,
)
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from jobrail.jobs.domain import Job
from jobrail.kernel.ids import JobId
from jobrail.store.dialects import hold_gates, paused_job, upsert_insert
from jobrail.store.errors import database_errors
from jobrail.store.mapping import job_from_row
from jobrail.store.tables import (
    HELD,
    HELD_LATER,
    UtcDateTime,
    dispatch_arrivals,
    dispatch_gates,
    dispatch_pauses,
    dispatch_queues,
    jobs,
    tenants,
)

_queue = bindparam("queue", type_=Text())
Line = tuple[str, str]  # a tenant's line in a queue: (tenant_id, fair_key)
# A pass holds its jobs' rows and the queue's row while it publishes: should its process
# hang (not die) mid-pass, Postgres ends the transaction after this long idle, and
# another dispatcher takes the queue over. Set with the lease's read: no round trip more.
_IDLE_TIMEOUT = func.set_config(
    literal("idle_in_transaction_session_timeout"), literal("10s"), true()
).label("idle_timeout")
_LINE = (jobs.c.rank_at, jobs.c.id)  # a line, in order (ix_jobs_held_lines)
_PAUSED = exists(select(dispatch_pauses.c.scope))  # anything, anywhere
_ANY_PAUSE = _PAUSED.label("paused")

WEIGHTS = select(tenants.c.id, tenants.c.weight).where(tenants.c.weight.is_not(None))
_now = bindparam("now", type_=UtcDateTime())
# Held and due: a job held with run_at or delay joins its line when it comes due.
_DUE = or_(jobs.c.run_after.is_(None), jobs.c.run_after <= _now)
LINES = (
    select(jobs.c.tenant_id, jobs.c.fair_key).where(jobs.c.queue == _queue, HELD, _DUE).distinct()
)
# The lines whose held jobs came due in (since, now] (ix_jobs_held_due).
CAME_DUE = (
    select(jobs.c.tenant_id, jobs.c.fair_key)
    .where(
        jobs.c.queue == _queue,
        HELD_LATER,
        jobs.c.run_after > bindparam("since", type_=UtcDateTime()),
        jobs.c.run_after <= _now,
    )
    .distinct()
)
ARRIVALS = (
    delete(dispatch_arrivals)
    .where(dispatch_arrivals.c.queue == _queue)
    .returning(dispatch_arrivals.c.tenant_id, dispatch_arrivals.c.fair_key)
)
# What moved in every queue (SqlaDispatchStore.stirs): arrivals, gates, held jobs come due.
_no_credit, _no_mark = cast(null(), Integer()), cast(null(), Boolean())
STIRS = union_all(
    select(
        literal_column("'arrived'").label("what"), dispatch_arrivals.c.queue, _no_credit, _no_mark
    ).distinct(),
    select(
        literal_column("'gate'"),
        dispatch_gates.c.queue,
        dispatch_gates.c.credit,
        dispatch_gates.c.spent,
    ),
    select(literal_column("'due'"), jobs.c.queue, _no_credit, _no_mark)
    .where(
        HELD_LATER,
        # Each queue's own range of ix_jobs_held_due (queue, run_after): without the
        # queue, the read would walk every job held for later, ten times a second.
        jobs.c.queue.in_(bindparam("queues", expanding=True)),
        jobs.c.run_after > bindparam("since", type_=UtcDateTime()),
        jobs.c.run_after <= _now,
    )
    .distinct(),
)
# One line's heads (SQLite, a statement per line).
HEADS_OF = (
    select(jobs.c.id)
    .where(
        jobs.c.queue == _queue,
        jobs.c.tenant_id == bindparam("tenant_id", type_=Text()),
        jobs.c.fair_key == bindparam("fair_key", type_=Text()),
        HELD,
        _DUE,
        ~paused_job(),
    )
    .order_by(*_LINE)
    .limit(bindparam("n", type_=Integer()))
)


def _heads_of_many() -> Any:
    """Postgres: every wanted line's heads in one statement, an index range each."""
    wanted = (
        func.unnest(
            bindparam("tenants", type_=ARRAY(Text())),
            bindparam("keys", type_=ARRAY(Text())),
            bindparam("counts", type_=ARRAY(Integer())),
        )
        .table_valued(
            column("tenant_id", Text()), column("fair_key", Text()), column("n", Integer())
        )
        .render_derived(name="w")
    )
    heads = (
        select(jobs.c.id)
        .where(
            jobs.c.queue == _queue,
            jobs.c.tenant_id == wanted.c.tenant_id,
            jobs.c.fair_key == wanted.c.fair_key,
            HELD,
            _DUE,
            ~paused_job(),
        )
        .order_by(*_LINE)
        .limit(wanted.c.n)
        .lateral("h")
    )
    return select(wanted.c.tenant_id, wanted.c.fair_key, heads.c.id).select_from(
        wanted.join(heads, true())
    )


HEADS_OF_MANY = _heads_of_many()


def _release(ids: Sequence[JobId], now: datetime) -> Any:
    return (
        update(jobs)
        .where(
            jobs.c.id.in_(ids),
            HELD,
            or_(jobs.c.deadline.is_(None), jobs.c.deadline > now),
            ~paused_job(),  # paused since the pass read its heads
        )
        .values(held_since=None)
        .returning(*jobs.c)
    )


class SqlaTurn:
    def __init__(
        self, conn: AsyncConnection, queue: str, lease: "_Lease", postgres: bool, now: datetime
    ) -> None:
        self._conn = conn
        self._queue = queue
        self._now = now
        self.term = lease.term
        self.paused = lease.paused
        self._postgres = postgres

    async def figures(self, drain_per_s: float, active_weight: float) -> None:
        await self._conn.execute(
            update(dispatch_queues)
            .where(dispatch_queues.c.queue == self._queue)
            .values(drain_per_s=drain_per_s, active_weight=active_weight)
        )

    async def arrivals(self) -> list[Line]:
        rows = await self._conn.execute(ARRIVALS, {"queue": self._queue})
        return [(tenant, key) for tenant, key in rows]

    async def lines(self) -> list[Line]:
        rows = await self._conn.execute(LINES, {"queue": self._queue, "now": self._now})
        return [(tenant, key) for tenant, key in rows]

    async def came_due(self, since: datetime) -> list[Line]:
        found = {"queue": self._queue, "since": since, "now": self._now}
        return [(tenant, key) for tenant, key in await self._conn.execute(CAME_DUE, found)]

    async def weights(self) -> dict[str, float]:
        rows = await self._conn.execute(WEIGHTS)
        return {tenant: float(weight) for tenant, weight in rows}

    async def heads(self, wants: Mapping[Line, int]) -> dict[Line, list[JobId]]:
        found: dict[Line, list[JobId]] = {line: [] for line in wants}
        if self._postgres:
            wanted = {
                "queue": self._queue,
                "now": self._now,
                "tenants": [tenant for tenant, _ in wants],
                "keys": [key for _, key in wants],
                "counts": list(wants.values()),
            }
            for tenant, key, job_id in await self._conn.execute(HEADS_OF_MANY, wanted):
                found[tenant, key].append(JobId(job_id))
            return found
        for (tenant, key), count in wants.items():
            ids = await self._conn.execute(
                HEADS_OF,
                {
                    "queue": self._queue,
                    "tenant_id": tenant,
                    "fair_key": key,
                    "n": count,
                    "now": self._now,
                },
            )
            found[tenant, key] = [JobId(job_id) for job_id in ids.scalars()]
        return found

    async def release(self, ids: Sequence[JobId], now: datetime) -> list[Job]:
        rows = await self._conn.execute(_release(ids, now))
        return [job_from_row(row) for row in rows.mappings()]


class SqlaDispatchStore:
    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine
        self._postgres = engine.dialect.name == "postgresql"
        self._gated: set[str] = set()  # the queues whose gate row exists

    @contextlib.asynccontextmanager
    async def turn(
        self, queue: str, holder: str, now: datetime, lease: timedelta
    ) -> AsyncIterator[SqlaTurn | None]:
        with database_errors():
            async with self._engine.begin() as conn:
                held = await self._lease(conn, queue, holder, now, lease)
                yield None if held is None else SqlaTurn(conn, queue, held, self._postgres, now)

    async def _lease(
        self, conn: AsyncConnection, queue: str, holder: str, now: datetime, lease: timedelta
    ) -> "_Lease | None":
        """The queue's lease if `holder` holds (or now takes) it; None if another
        holder's runs, or another pass has the row."""
        q = dispatch_queues
        columns: list[Any] = [q.c.holder, q.c.term, q.c.lease_until, _ANY_PAUSE]
        if self._postgres:
            columns.append(_IDLE_TIMEOUT)
        row = (
            await conn.execute(
                select(*columns).where(q.c.queue == queue).with_for_update(skip_locked=True)
            )
        ).first()
        until = now + lease
        if row is None:  # no row yet, or another pass has it
            first = (
                upsert_insert(self._engine.dialect.name, q)
                .values(queue=queue, holder=holder, term=1, lease_until=until)
                .on_conflict_do_nothing()
                .returning(q.c.term, _ANY_PAUSE)
            )
            made = (await conn.execute(first)).first()
            return None if made is None else _Lease(int(made.term), bool(made.paused))
        running = row.lease_until is not None and row.lease_until > now
        if running and row.holder != holder:
            return None
        term = row.term if running else row.term + 1
        if not running or row.lease_until - now < lease * 2 / 3:  # renewed now and then
            await conn.execute(
                update(q)
                .where(q.c.queue == queue)
                .values(holder=holder, term=term, lease_until=until)
            )
        return _Lease(int(term), bool(row.paused))

    async def stirs(
        self, queues: Sequence[str], since: datetime, now: datetime
    ) -> tuple[frozenset[str], dict[str, tuple[int, bool]], frozenset[str]]:
        """One statement, outside a transaction on Postgres (a single round trip)."""
        arrived: set[str] = set()
        gates: dict[str, tuple[int, bool]] = {}
        due: set[str] = set()
        with database_errors():
            async with self._engine.connect() as conn:
                if self._postgres:
                    conn = await conn.execution_options(isolation_level="AUTOCOMMIT")
                for what, queue, credit, spent in await conn.execute(
                    STIRS, {"queues": list(queues), "since": since, "now": now}
                ):
                    if what == "arrived":
                        arrived.add(queue)
                    elif what == "gate":
                        gates[queue] = (int(credit), bool(spent))
                    else:
                        due.add(queue)
        return frozenset(arrived), gates, frozenset(due)

    async def gate(self, queue: str, credit: int) -> bool:
        """Set the queue's fast-path credit (``dispatch_gates``), in a transaction of its
        own, after the pass: it waits for the enqueues taking from it, and never while
        holding what they wait for. Written only if it changes. A credit is not given
        while the gate is marked spent (an enqueue held a job since this pass looked: the
        next one sees it), and closing clears the mark."""
        g = dispatch_gates
        if credit > 0:
            setting = update(g).where(g.c.queue == queue, ~g.c.spent, g.c.credit != credit)
        else:
            setting = update(g).where(g.c.queue == queue, or_(g.c.credit != 0, g.c.spent))
        with database_errors():
            async with self._engine.begin() as conn:
                if credit > 0:
                    await hold_gates(conn, alone=False)
                changed = (await conn.execute(setting.values(credit=credit, spent=False))).rowcount
                if changed == 0 and credit > 0 and queue not in self._gated:
                    made = await conn.execute(
                        upsert_insert(self._engine.dialect.name, g)
                        .values(queue=queue, credit=credit)
                        .on_conflict_do_nothing()
                    )
                    changed = made.rowcount
                if changed and credit > 0 and await self._paused_now(conn, queue):
                    changed = 0
        if credit > 0:  # its row exists now: an idle pass that changes nothing writes nothing
            self._gated.add(queue)
        return changed > 0

    async def _paused_now(self, conn: AsyncConnection, queue: str) -> bool:
        """Take back a credit just written if anything is paused now: the pass that chose
        it read "nothing paused" before, and a pause may have committed since. A pause
        not committed yet waits for this transaction (hold_gates), then takes the credit
        away itself."""
        g = dispatch_gates
        closed = await conn.execute(update(g).where(g.c.queue == queue, _PAUSED).values(credit=0))
        return closed.rowcount > 0


@dataclass(frozen=True)
class _Lease:
    term: int
    paused: bool  # whether anything is paused, anywhere
