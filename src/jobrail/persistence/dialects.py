from collections.abc import Mapping
from typing import Any

from sqlalchemy import Table, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import RowMapping
from sqlalchemy.ext.asyncio import AsyncSession

from jobrail.kernel.errors import ConflictError


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
) -> RowMapping | None:
    """Insert `row` into `table` (jobs or flows) unless the tenant has a row of its
    idempotency key already: None when inserted, else that row. ConflictError, naming
    `what` ("a job"), while that other row is not visible yet (its transaction is still
    open)."""
    dialect = session.get_bind().dialect.name
    statement = (
        upsert_insert(dialect, table)
        .values(dict(row))
        .on_conflict_do_nothing(index_elements=["tenant_id", "idempotency_key"])
        .returning(table.c.id)
    )
    inserted = (await session.execute(statement, execution_options=options)).scalar_one_or_none()
    if inserted is not None:
        return None
    existing = await session.execute(
        select(table).where(
            table.c.tenant_id == row["tenant_id"],
            table.c.idempotency_key == row["idempotency_key"],
        ),
        execution_options=options,
    )
    found = existing.mappings().first()
    if found is None:
        raise ConflictError(f"{what} with this Idempotency-Key is being created; try again")
    return found
