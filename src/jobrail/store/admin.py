"""Creating and dropping Postgres databases (for `jobrail migrate --create-database` and tests).

Their connections keep no prepared statement (asyncpg's cache off): they may go through a
pooler in transaction mode, whose server connections other clients share."""

import asyncpg
from sqlalchemy.engine import make_url


def _server_dsn(url: str) -> tuple[str, str]:
    parsed = make_url(url)
    if parsed.get_backend_name() != "postgresql" or not parsed.database:
        raise ValueError("a postgresql URL with a database name is needed")
    server = parsed.set(drivername="postgresql", database="postgres")
    return server.render_as_string(hide_password=False), parsed.database


async def create_database_if_missing(url: str) -> bool:
    dsn, name = _server_dsn(url)
    conn = await asyncpg.connect(dsn, statement_cache_size=0)
    try:
        exists = await conn.fetchval("SELECT 1 FROM pg_database WHERE datname = $1", name)
        if exists:
            return False
        await conn.execute(f'CREATE DATABASE "{name}"')
        return True
    finally:
        await conn.close()


async def drop_database(url: str) -> None:
    dsn, name = _server_dsn(url)
    conn = await asyncpg.connect(dsn, statement_cache_size=0)
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await conn.close()
