"""The host's chain, on jobrail's database (the URL of the app's JobRail settings).

jobrail's tables are in that database too, made by its own chains: `exclude_jobrail_tables`
keeps them out of this chain's autogenerate and `alembic check`, which would otherwise
propose to drop every one of them.
"""

import asyncio

from alembic import context
from host_app.main import metadata, rail
from sqlalchemy import Connection
from sqlalchemy.ext.asyncio import create_async_engine

from jobrail.sql import exclude_jobrail_tables


def _upgrade(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=metadata,
        include_object=exclude_jobrail_tables(rail),
    )
    with context.begin_transaction():
        context.run_migrations()


async def _run() -> None:
    engine = create_async_engine(rail.settings.database.url.get_secret_value())
    async with engine.connect() as connection:
        await connection.run_sync(_upgrade)
    await engine.dispose()


asyncio.run(_run())
