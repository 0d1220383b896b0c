"""Alembic environment: the URL comes from jobrail's settings, never from alembic.ini."""

import asyncio

from alembic import context
from sqlalchemy.engine import Connection

from jobrail.modules import load_modules
from jobrail.persistence.engine import create_engine
from jobrail.persistence.tables import metadata
from jobrail.settings import DatabaseSettings, Settings, load_settings

config = context.config

# The contexts' tables join the platform's metadata when their modules are imported.
load_modules(Settings.model_fields["modules"].get_default(call_default_factory=True))


def _database_settings() -> DatabaseSettings:
    url = config.attributes.get("database_url")
    if url is not None:
        return DatabaseSettings(url=url)
    return load_settings().database


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
    engine = create_engine(_database_settings())
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
