from collections.abc import Mapping
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Select,
    Table,
    and_,
    case,
    exists,
    func,
    literal,
    literal_column,
    or_,
    select,
    true,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import RowMapping
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

from jobrail.jobs.domain import Job
from jobrail.kernel.errors import ConflictError, QueuedCapError
from jobrail.store.tables import (
    dispatch_arrivals,
    dispatch_gates,
    dispatch_pauses,
    jobs,
    tenants,
)

# The unique index of jobs and of flows: one row per tenant and idempotency key (NULL
# keys never collide).
IDEMPOTENCY_KEY = ("tenant_id", "idempotency_key")


def keyed(table: Table, *, tenant_id: Any, idempotency_key: Any) -> ColumnElement[bool]:
    """The row of `table` (jobs or flows) that the tenant's idempotency key made."""
    return and_(table.c.tenant_id == tenant_id, table.c.idempotency_key == idempotency_key)


def key_is_free(table: Table, *, tenant_id: Any, idempotency_key: Any) -> ColumnElement[bool]:
    """The tenant's key made no row of `table`: a key names one request, whether it
    started a job or a batch."""
    return ~exists().where(keyed(table, tenant_id=tenant_id, idempotency_key=idempotency_key))


# The statuses of a job waiting to start, which a tenant's cap counts (literals: never
# bound, so that a compiled statement has only its callers' parameters).
WAITING: list[ColumnElement[Any]] = [
    literal_column(f"'{status}'") for status in ("pending", "retrying")
]


def queued_cap(tenant_id: Any) -> Any:
    """The tenant's cap on its jobs waiting to start (tenants.max_queued), or NULL."""
    query = select(tenants.c.max_queued).where(tenants.c.id == tenant_id)
    return query.correlate_except(tenants).scalar_subquery()


def under_queued_cap(tenant_id: Any) -> ColumnElement[bool]:
    """The tenant has fewer jobs waiting to start than its cap: at most the cap's
    entries of an index are read, and none for a tenant without a cap. Soft by the
    statements running at once (none sees the others' rows)."""
    cap = queued_cap(tenant_id)
    waiting = (
        select(literal_column("1"))
        .select_from(jobs)
        .where(jobs.c.tenant_id == tenant_id, jobs.c.status.in_(WAITING))
        .limit(cap)
        .correlate_except(jobs, tenants)  # the enqueued row's tenant, however deep
        .subquery()
    )
    counted = select(func.count()).select_from(waiting).scalar_subquery()
    return case((cap.is_(None), true()), else_=counted < cap)


def upsert_insert(dialect_name: str, table: Table) -> Any:
    """An INSERT that supports ON CONFLICT, on Postgres and SQLite alike."""
    module: Any = postgresql if dialect_name == "postgresql" else sqlite
    return module.insert(table)


async def insert_or_existing(
    session: AsyncSession,
    table: Table,
    row: Mapping[str, Any],
    options: Mapping[str, Any],
    what: str,
    other: Table | None = None,
    holder: Select[Any] | None = None,
    capped: bool = False,
) -> RowMapping | None:
    """Insert `row` into `table` (jobs or flows) unless the tenant has a row of its
    idempotency key already, or (a job with a unique key) `holder` finds the active job
    that holds its unique key: None when inserted, else that row. `capped`: QueuedCapError
    if the tenant has as many jobs waiting to start as its cap. ConflictError, naming `what` ("a
    job"), while that other row is not visible yet (its transaction is still open), and
    when the key made a row of `other` (flows for a job, jobs for a flow): a key names
    one request, whether it started a job or a batch."""
    key = row["idempotency_key"]
    dialect = session.get_bind().dialect.name
    conditions: list[ColumnElement[bool]] = []
    if other is not None and key is not None:
        # The row is left out, as for a key of its own table, when the key made a row of
        # `other`.
        conditions.append(key_is_free(other, tenant_id=row["tenant_id"], idempotency_key=key))
    if capped:
        conditions.append(under_queued_cap(literal(row["tenant_id"], table.c.tenant_id.type)))
    if not conditions:
        statement = upsert_insert(dialect, table).values(dict(row))
    else:  # one statement still
        values = select(*(literal(value, table.c[name].type) for name, value in row.items()))
        statement = upsert_insert(dialect, table).from_select(list(row), values.where(*conditions))
    # No target: a row that any unique index refuses (its idempotency key's, or its
    # unique key's while an active job holds it) is left out alike.
    statement = statement.on_conflict_do_nothing().returning(table.c.id)
    inserted = (await session.execute(statement, execution_options=options)).scalar_one_or_none()
    if inserted is not None:
        return None
    if key is not None:
        existing = await session.execute(
            select(table).where(keyed(table, tenant_id=row["tenant_id"], idempotency_key=key)),
            execution_options=options,
        )
        found = existing.mappings().first()
        if found is not None:
            return found
        if other is not None:
            used_for = await key_used_for(session, other, row["tenant_id"], key, options)
            if used_for is not None:
                raise ConflictError(f"Idempotency-Key {key!r} was already used for {used_for}")
    if holder is not None:
        held = await session.execute(holder, execution_options=options)
        active: RowMapping | None = held.mappings().first()
        if active is not None:
            return active
    if capped:
        tenant = literal(row["tenant_id"], table.c.tenant_id.type)
        at_cap = select(queued_cap(tenant), under_queued_cap(tenant))
        cap, under = (await session.execute(at_cap, execution_options=options)).one()
        if cap is not None and not under:
            raise QueuedCapError(row["tenant_id"], cap)
    raise ConflictError(f"{what} with this key is being created; try again")


async def key_used_for(
    session: AsyncSession, table: Table, tenant_id: str, key: str, options: Mapping[str, Any]
) -> str | None:
    """What the tenant's `key` made in `table`: "a job", "a batch", "a chain", or None.

    Not under a lock: two requests racing with one key, one for a job and one for a
    batch, can both succeed (each table's own key stays unique).
    """
    flows = "kind" in table.c
    query = (
        select(table.c.kind if flows else table.c.id)
        .where(keyed(table, tenant_id=tenant_id, idempotency_key=key))
        .limit(1)
    )
    found = (await session.execute(query, execution_options=options)).first()
    if found is None:
        return None
    return f"a {found[0]}" if flows else "a job"


async def note_arrival(session: AsyncSession, job: Job, options: Mapping[str, Any]) -> None:
    """Note, for the dispatcher, that the held `job`'s tenant has a job in its queue
    (jobrail.dispatch): one row per queue and tenant until the dispatcher takes it."""
    dialect = session.get_bind().dialect.name
    row = {"queue": job.queue, "tenant_id": job.tenant_id, "fair_key": job.fair_key}
    statement = upsert_insert(dialect, dispatch_arrivals).values(row)
    await session.execute(_touched(statement), execution_options=options)


def _touched(statement: Any) -> Any:
    """An arrival's upsert that locks the note it finds (writing it again) rather than
    passing it by: a dispatcher's pass that takes the notes then waits for this
    transaction, and reads the tenant's line after it committed. Left alone, the pass
    could take the note, read the line without this job, and drop the tenant, leaving
    the job to the next rediscovery."""
    return statement.on_conflict_do_update(
        index_elements=["queue", "tenant_id", "fair_key"],
        set_={"tenant_id": statement.excluded.tenant_id},
    )


def arrivals_noted(added: Any) -> Any:
    """Postgres, in the enqueue's statement: `note_arrival` for the held jobs among
    `added` (a CTE of the jobs inserted), once per queue and tenant."""
    lines = (
        select(added.c.queue, added.c.tenant_id, added.c.fair_key)
        .where(added.c.held_since.is_not(None))
        .distinct()
        # In the primary key's order, as every other writer of the notes takes them:
        # two statements that note the same tenants never wait for each other in turn.
        .order_by(added.c.queue, added.c.tenant_id, added.c.fair_key)
    )
    statement = postgresql.insert(dispatch_arrivals).from_select(
        ["queue", "tenant_id", "fair_key"], lines
    )
    return _touched(statement).cte("arrived")


def paused_job() -> ColumnElement[bool]:
    """The job (a row of `jobs`) is of a queue, a type or a tenant an operator paused
    (jobrail.dispatch.pauses): it is neither released nor started until resumed."""
    p = dispatch_pauses
    return exists().where(
        or_(
            and_(p.c.scope == literal_column("'queue'"), p.c.value == jobs.c.queue),
            and_(p.c.scope == literal_column("'type'"), p.c.value == jobs.c.type),
            and_(p.c.scope == literal_column("'tenant'"), p.c.value == jobs.c.tenant_id),
        )
    )


async def through_gate(session: AsyncSession, queue: str, options: Mapping[str, Any]) -> bool:
    """Whether a job its enqueue would hold goes out at once instead (jobrail.dispatch:
    its queue's fast-path credit, ``dispatch_gates``, is not spent), in a session's
    transaction. SQLite takes one from the credit (its writers are serial anyway). On
    Postgres (a host's session) it only reads it: taking it would lock the queue's gate
    row, and every other enqueue of the queue with it, for the rest of the host's
    transaction; so a host's concurrent enqueues may overdraw it, by their number, until
    the queue's next pass (up to `quiet_interval_s` while the queue is quiet: these
    enqueues leave no mark that the dispatcher's look for what moved would see)."""
    g = dispatch_gates
    if session.get_bind().dialect.name == "postgresql":
        read = select(g.c.credit).where(g.c.queue == queue)
        return bool(((await session.execute(read, execution_options=options)).scalar() or 0) > 0)
    take = (
        update(g)
        .where(g.c.queue == queue, or_(g.c.credit > 0, ~g.c.spent))
        .values(credit=g.c.credit - 1, spent=or_(g.c.spent, g.c.credit <= 0))
        .returning(g.c.credit)
    )
    left = (await session.execute(take, execution_options=options)).scalar()
    return left is not None and left >= 0


async def hold_gates(conn: AsyncConnection, *, alone: bool) -> None:
    """Postgres: the lock that keeps a pause and a dispatcher's credit apart, for the rest
    of `conn`'s transaction: a pause takes it alone, each dispatcher writing a credit
    shared. Without it a credit written (or its gate row made) while a pause was under
    way could outlive the pause: the pause's write would not see a row inserted or
    given credit by a transaction not committed yet, and the dispatcher's check for
    pauses would not see the pause's. A transaction-level advisory lock: it holds
    through a pooler in transaction mode. SQLite's write transactions are serial
    already (they begin IMMEDIATE)."""
    if conn.dialect.name == "postgresql":
        take = func.pg_advisory_xact_lock if alone else func.pg_advisory_xact_lock_shared
        await conn.execute(select(take(func.hashtext("jobrail.dispatch_gates"))))
