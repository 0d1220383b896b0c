import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Iterable, Mapping
from typing import Any

from sqlalchemy import event
from sqlalchemy.ext.asyncio import (
    AsyncConnection,
    AsyncEngine,
    async_sessionmaker,
    create_async_engine,
)

from jobrail.kernel.errors import InvalidInputError
from jobrail.settings import DatabaseSettings
from jobrail.store import json_codec
from jobrail.store.platform_schema import search_path_sql

log = logging.getLogger("jobrail")

NUL_TEXT_ERROR = "a text value holds a NUL character (U+0000), which cannot be stored"


def create_engine(settings: DatabaseSettings) -> AsyncEngine:
    """One engine per process, made by the composition root (never at import time)."""
    url = settings.url.get_secret_value()
    if settings.is_sqlite:
        return _sqlite_engine(url, settings)
    engine = create_async_engine(
        url,
        echo=settings.echo,
        pool_size=settings.pool_size,
        max_overflow=settings.max_overflow,
        pool_timeout=settings.pool_timeout_s,
        # No pre-ping: it costs a round trip per checkout. A connection found dead is
        # invalidated by the failing statement and replaced on the next checkout.
        pool_recycle=1800,
        connect_args={"timeout": settings.connect_timeout_s, **pooled_connect_args(settings)},
        json_serializer=json_codec.dumps,
        # A failed statement's error names the statement, not its values (a tenant's
        # payload): the text goes to logs and to a job's last_error.
        hide_parameters=True,
    )
    _refuse_nul_text(engine)
    if settings.schema_ is not None:
        _platform_schema_first(engine, settings.schema_)
    return engine


def pooled_connect_args(settings: DatabaseSettings) -> dict[str, Any]:
    """SQLAlchemy's asyncpg arguments for a pooler in transaction mode: a server
    connection serves many clients, one transaction at a time, so a named prepared
    statement kept for later would be missing on the next server connection, or clash
    with another client's of the same name. Both caches off (asyncpg's and SQLAlchemy's)
    and the unnamed statement: it lives from its prepare to its execution, inside one
    transaction (SQLAlchemy begins one before its first statement), and is replaced by
    the next, so nothing is left behind on the server connection either (unique names
    would be, until the pooler closes the connection)."""
    if not settings.transaction_pooled:
        return {}
    return {
        "statement_cache_size": 0,
        "prepared_statement_cache_size": 0,
        "prepared_statement_name_func": _unnamed,
    }


def _unnamed() -> str:
    return ""


async def close_engine(engine: AsyncEngine, *, wait_s: float = 5.0) -> None:
    """Close the engine's pool once the connections in use have come back (for up to
    `wait_s`): work still under way at shutdown (a lookup whose caller has gone, a last
    write) ends on an open pool. `dispose` alone closes only the idle connections and
    starts a new pool: a connection still in use would go back to the old one, where
    nothing ever closes it."""
    pool: Any = engine.pool
    in_use = getattr(pool, "checkedout", None)
    if in_use is not None and in_use():
        returned = asyncio.Event()
        listener = lambda *_: returned.set()  # noqa: E731 - a connection came back
        event.listen(pool, "checkin", listener)
        try:
            async with asyncio.timeout(wait_s):
                while in_use():
                    returned.clear()
                    await returned.wait()
        except TimeoutError:
            log.warning("closing the database pool with %d connections still in use", in_use())
        finally:
            event.remove(pool, "checkin", listener)
    await engine.dispose()


def _platform_schema_first(engine: AsyncEngine, schema: str) -> None:
    """Every connection finds the platform's tables in `schema` (see
    persistence.platform_schema)."""
    statement = search_path_sql(schema)

    @event.listens_for(engine.sync_engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # On the driver's connection, outside any transaction: a rollback cannot undo it.
        dbapi_connection.run_async(lambda connection: connection.execute(statement))


def _refuse_nul_text(engine: AsyncEngine) -> None:
    """Postgres refuses U+0000 in text (UntranslatableCharacterError), after the
    statements before it in the transaction ran: refuse it before the statement is
    sent, as the clear error the API answers with a 422. The API refuses NUL at the
    edge; this is the backstop for values made elsewhere (workers, the CLI)."""

    @event.listens_for(engine.sync_engine, "before_cursor_execute")
    def _check(
        _conn: Any, _cursor: Any, _statement: str, parameters: Any, _context: Any, many: bool
    ) -> None:
        for row in parameters if many else (parameters,):
            values: Iterable[Any] = row.values() if isinstance(row, Mapping) else row or ()
            for value in values:
                if isinstance(value, str) and "\x00" in value:
                    raise InvalidInputError(NUL_TEXT_ERROR)


def _sqlite_engine(url: str, settings: DatabaseSettings) -> AsyncEngine:
    engine = create_async_engine(
        url,
        echo=settings.echo,
        connect_args={"timeout": 30},
        json_serializer=json_codec.dumps,
        hide_parameters=True,  # as create_engine's
    )

    @event.listens_for(engine.sync_engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Take transactions into our own hands so that writes begin IMMEDIATE:
        # SQLite then serialises writers instead of failing them at commit.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA busy_timeout=30000")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.close()

    @event.listens_for(engine.sync_engine, "begin")
    def _on_begin(connection: Any) -> None:
        # A read (see `reading`) takes no write lock: WAL lets it read beside a writer.
        read_only = connection.get_execution_options().get(READ_ONLY_OPTION)
        connection.exec_driver_sql("BEGIN" if read_only else "BEGIN IMMEDIATE")

    return engine


READ_ONLY_OPTION = "jobrail_read_only"


@contextlib.asynccontextmanager
async def reading(engine: AsyncEngine) -> AsyncIterator[AsyncConnection]:
    """A connection for reads only. On SQLite its transaction begins DEFERRED rather than
    IMMEDIATE, so it never waits for (nor holds up) a writer; elsewhere it is a plain
    connection."""
    async with engine.connect() as connection:
        yield await connection.execution_options(**{READ_ONLY_OPTION: True})


def create_sessionmaker(engine: AsyncEngine) -> async_sessionmaker[Any]:
    return async_sessionmaker(engine, expire_on_commit=False, autoflush=False)
