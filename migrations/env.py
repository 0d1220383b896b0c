"""Alembic environment: the URL comes from jobrail's settings, never from alembic.ini."""

import asyncio

from alembic import context
from sqlalchemy.engine import Connection

from jobrail.persistence.engine import create_engine
from jobrail.persistence.tables import metadata
from jobrail.settings import load_settings

config = context.config


def _database_url_settings():  # type: ignore[no-untyped-def]
    url = config.attributes.get("database_url")
    settings = load_settings()
    if url:
        return settings.database.model_copy(update={"url": url})
    return settings.database


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


async def _run_async() -> None:
    engine = create_engine(_database_url_settings())
    try:
        async with engine.connect() as connection:
            await connection.run_sync(_run)
            await connection.commit()
    finally:
        await engine.dispose()


if context.is_offline_mode():
    raise SystemExit("offline migrations are not supported; run `make migrate`")

connection = config.attributes.get("connection")
if connection is not None:
    _run(connection)
else:
    asyncio.run(_run_async())
