"""At shutdown the database pool closes once the connections still in use have come
back, so a last write or lookup still under way neither fails on a closed pool nor
leaves behind a connection that no one closes."""

import asyncio
from pathlib import Path

from pydantic import SecretStr
from sqlalchemy import text

from jobrail.settings import DatabaseSettings
from jobrail.store.engine import close_engine, create_engine


async def test_the_pool_closes_once_a_connection_in_use_has_come_back(tmp_path: Path) -> None:
    engine = create_engine(DatabaseSettings(url=SecretStr(f"sqlite+aiosqlite:///{tmp_path}/e.db")))
    holding = asyncio.Event()

    async def last_write() -> int:
        async with engine.connect() as connection:
            value = await connection.scalar(text("SELECT 1"))
            holding.set()
            await asyncio.sleep(0.2)
            return int(value)

    write = asyncio.create_task(last_write())
    await holding.wait()
    pool = engine.pool

    await close_engine(engine)

    assert write.done()
    assert await write == 1
    # Every connection of that pool is closed: none went back to it after it closed.
    assert (pool.checkedout(), pool.checkedin()) == (0, 0)  # type: ignore[attr-defined]


async def test_a_connection_kept_past_the_wait_does_not_hold_the_close_up(
    tmp_path: Path,
) -> None:
    engine = create_engine(DatabaseSettings(url=SecretStr(f"sqlite+aiosqlite:///{tmp_path}/e.db")))
    connection = await engine.connect()
    try:
        await asyncio.wait_for(close_engine(engine, wait_s=0.05), timeout=5)
    finally:
        await connection.close()
