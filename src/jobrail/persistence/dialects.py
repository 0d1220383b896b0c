from typing import Any

from sqlalchemy import Table
from sqlalchemy.dialects import postgresql, sqlite


def upsert_insert(dialect_name: str, table: Table) -> Any:
    """An INSERT that supports ON CONFLICT, on Postgres and SQLite alike."""
    module: Any = postgresql if dialect_name == "postgresql" else sqlite
    return module.insert(table)
