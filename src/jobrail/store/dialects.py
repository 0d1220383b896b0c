from collections.abc import Mapping
from typing import Any

from sqlalchemy import ColumnElement, Select, Table, and_, exists, literal, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import RowMapping
from sqlalchemy.ext.asyncio import AsyncSession

from jobrail.kernel.errors import ConflictError

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
) -> RowMapping | None:
    """Insert `row` into `table` (jobs or flows) unless the tenant has a row of its
    idempotency key already, or (a job with a unique key) `holder` finds the active job
    that holds its unique key: None when inserted, else that row. ConflictError, naming `what` ("a
    job"), while that other row is not visible yet (its transaction is still open), and
    when the key made a row of `other` (flows for a job, jobs for a flow): a key names
    one request, whether it started a job or a batch."""
    key = row["idempotency_key"]
    dialect = session.get_bind().dialect.name
    if other is None or key is None:
        statement = upsert_insert(dialect, table).values(dict(row))
    else:
        # One statement still: the row is left out, as for a key of its own table, when
        # the key made a row of `other`.
        free = key_is_free(other, tenant_id=row["tenant_id"], idempotency_key=key)
        values = select(*(literal(value, table.c[name].type) for name, value in row.items()))
        statement = upsert_insert(dialect, table).from_select(list(row), values.where(free))
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
