"""The host's chain, on jobrail's database (the URL of the app's JobRail settings)."""

import asyncio

from alembic import context
from host_app.main import DATABASE_URL, metadata
from sqlalchemy import Connection
from sqlalchemy.ext.asyncio import create_async_engine


def _upgrade(connection: Connection) -> None:
    context.configure(connection=connection, target_metadata=metadata)
    with context.begin_transaction():
        context.run_migrations()


async def _run() -> None:
    engine = create_async_engine(DATABASE_URL)
    async with engine.connect() as connection:
        await connection.run_sync(_upgrade)
    await engine.dispose()


asyncio.run(_run())
