"""The asyncpg pool the hot paths on Postgres run on: one statement, one round trip each.

The stores on it (``store/pg_job_store.py``, ``store/pg_intake.py``; their SQL is
``store/pg_queries.py``) acquire a connection per statement, run it alone in autocommit
mode and give the connection back. Here: the pool (its JSON codecs, the platform's
search path, a release without a reset) and what a failed statement becomes.
"""

import json
from typing import Any

import asyncpg
from sqlalchemy.engine import make_url

from jobrail.kernel.errors import InvalidInputError, StoreUnavailableError
from jobrail.settings import DatabaseSettings
from jobrail.store import json_codec
from jobrail.store.errors import UNAVAILABLE_DRIVER_ERRORS, summary
from jobrail.store.platform_schema import search_path_sql

PgPool = asyncpg.Pool

_UNAVAILABLE = UNAVAILABLE_DRIVER_ERRORS


async def _init(connection: asyncpg.Connection) -> None:
    for kind in ("json", "jsonb"):
        await connection.set_type_codec(
            kind, encoder=json_codec.dumps, decoder=json.loads, schema="pg_catalog"
        )


async def _keep_session(connection: asyncpg.Connection) -> None:
    """Release without asyncpg's default reset (a RESET ALL round trip per release):
    these statements run alone, in autocommit, and change no session state. asyncpg
    still rolls back a connection left inside a transaction."""


async def create_pool(settings: DatabaseSettings) -> asyncpg.Pool:
    url = make_url(settings.url.get_secret_value()).set(drivername="postgresql")
    schema = settings.schema_

    async def init(connection: asyncpg.Connection) -> None:
        await _init(connection)
        if schema is not None:  # the statements above name the tables bare
            await connection.execute(search_path_sql(schema))

    pool = asyncpg.create_pool(
        url.render_as_string(hide_password=False),
        min_size=0,  # connect on first use: a process starts even with the database down
        max_size=settings.pool_size,
        timeout=settings.connect_timeout_s,
        command_timeout=settings.pool_timeout_s * 3,
        init=init,
        reset=_keep_session,
        # A pooler in transaction mode: no statement kept by name past its execution
        # (asyncpg then prepares each one unnamed, in the round trip before it runs).
        **({"statement_cache_size": 0} if settings.transaction_pooled else {}),
    )
    return await pool


class _Pg:
    def __init__(self, pool: asyncpg.Pool) -> None:
        # No acquire timeout: asyncpg's wait_for costs a task per call; a pool with no
        # free connection waits for one, and an unreachable server fails at connect.
        self._pool = pool

    async def _fetchrow(self, query: str, *args: Any) -> Any:
        try:
            async with self._pool.acquire() as connection:
                try:
                    return await connection.fetchrow(query, *args)
                except asyncpg.InternalClientError:
                    _discard(connection)
                    raise
        except _UNAVAILABLE as exc:
            raise StoreUnavailableError(summary(exc)) from exc
        except asyncpg.DataError as exc:
            _raise_refused_value(exc)
            raise

    async def _fetch(self, query: str, *args: Any) -> list[Any]:
        try:
            async with self._pool.acquire() as connection:
                try:
                    rows: list[Any] = await connection.fetch(query, *args)
                    return rows
                except asyncpg.InternalClientError:
                    _discard(connection)
                    raise
        except _UNAVAILABLE as exc:
            raise StoreUnavailableError(summary(exc)) from exc
        except asyncpg.DataError as exc:
            _raise_refused_value(exc)
            raise

    async def _execute(self, query: str, *args: Any) -> None:
        try:
            async with self._pool.acquire() as connection:
                try:
                    await connection.execute(query, *args)
                except asyncpg.InternalClientError:
                    _discard(connection)
                    raise
        except _UNAVAILABLE as exc:
            raise StoreUnavailableError(summary(exc)) from exc
        except asyncpg.DataError as exc:
            _raise_refused_value(exc)
            raise


def _raise_refused_value(exc: asyncpg.DataError) -> None:
    """asyncpg wraps what a codec raised (json_codec refusing a NUL) in DataError: give
    the caller the codec's own error, which the API answers with a 422."""
    if isinstance(exc.__cause__, InvalidInputError):
        raise exc.__cause__ from None


def _discard(connection: asyncpg.Connection) -> None:
    """A connection the server dropped in the middle of a statement can be left in a
    state asyncpg refuses to use again ("cannot switch to state ...; another operation
    is in progress"): close it, so that the pool opens a new one for the retry."""
    connection.terminate()
