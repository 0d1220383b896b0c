"""Where the platform's tables live: the database's default schema, or the Postgres
schema of ``JOBRAIL_DATABASE__SCHEMA`` (so that names like ``jobs`` or ``outbox`` cannot
clash with a host's own tables).

Every connection jobrail opens itself (its SQLAlchemy engine, its asyncpg pool, the
platform's migrations) puts that schema first on its ``search_path``, ahead of the
database's own search path: the statements name the tables bare, the Core and ORM ones,
the hot paths' SQL compiled from them (``store/pg_queries.py``) and the migrations' SQL
alike, and find the platform's tables in the schema and every other table (the
contexts', a host's) where they were before. This is set once per connection, when it
opens, rather than by qualifying each statement: the contexts' tables share jobrail's
sessions and transactions, and SQLAlchemy's ``schema_translate_map`` cannot tell their
unqualified tables from the platform's. The search path is session state, which a pooler
in transaction mode does not keep (the next transaction may run on another server
connection): a schema needs the pooler's session mode, and the settings refuse it with
``JOBRAIL_DATABASE__POOLER=transaction``.

A host's own session is not jobrail's to configure: what jobrail writes in it
(``facade.host_session``) names its tables qualified instead, through
``schema_translate_map``, which leaves the host's own statements alone.
"""

from typing import Any


def quoted(schema: str) -> str:
    """The schema as a SQL identifier (DatabaseSettings allows only plain names)."""
    return f'"{schema}"'


def search_path_sql(schema: str) -> str:
    """Put `schema` first on this session's search path, the database's own after it.

    Not transactional (``is_local`` false): it lasts as long as the connection."""
    first = f"'{quoted(schema)}, '"
    return f"SELECT set_config('search_path', {first} || current_setting('search_path'), false)"


def create_schema_sql(schema: str) -> str:
    return f"CREATE SCHEMA IF NOT EXISTS {quoted(schema)}"


def qualified(schema: str | None) -> dict[str, Any]:
    """Execution options that name the platform's tables in `schema` (none for the
    default schema). Only for statements that touch the platform's tables alone."""
    return {"schema_translate_map": {None: schema}} if schema is not None else {}
