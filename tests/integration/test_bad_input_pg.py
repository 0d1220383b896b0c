"""On Postgres, a NUL character is a 422 too, and never reaches the server."""

from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from sqlalchemy import text

from jobrail.kernel.errors import InvalidInputError
from jobrail.settings import DatabaseSettings
from jobrail.store.engine import create_engine
from jobrail.store.pg_pool import _Pg, create_pool
from tests.api.test_bad_input import assert_nul_refused
from tests.support.fixtures import ApiClient


async def test_a_nul_character_anywhere_in_a_request_is_a_422(api: ApiClient) -> None:
    await assert_nul_refused(api)


async def test_a_payload_is_stored_as_utf8_not_ascii_escapes(
    api: ApiClient, database_url: str, workers: Callable[..., Awaitable[Any]]
) -> None:
    await workers()
    message = "😀" * 1000
    job_id = await api.echo(message=message)
    await api.wait_status(job_id, "succeeded", timeout=30)

    engine = create_engine(DatabaseSettings(url=database_url))  # type: ignore[arg-type]
    try:
        async with engine.connect() as conn:
            sizes = (
                await conn.execute(
                    text("SELECT octet_length(payload::text), octet_length(result::text) FROM jobs")
                )
            ).one()
    finally:
        await engine.dispose()
    assert max(sizes) < 4 * 1000 + 100  # 4 UTF-8 bytes per emoji, not 12 of \\ud83d\\ude00


async def test_the_sqlalchemy_engine_refuses_nul_text_before_sending_it(
    database_url: str,
) -> None:
    engine = create_engine(DatabaseSettings(url=database_url))  # type: ignore[arg-type]
    try:
        async with engine.connect() as conn:
            with pytest.raises(InvalidInputError, match="NUL"):
                await conn.execute(text("SELECT :value"), {"value": "a\x00b"})
            with pytest.raises(InvalidInputError, match="NUL"):
                await conn.execute(text("SELECT CAST(:doc AS jsonb)"), {"doc": "x\x00"})
        async with engine.connect() as conn:
            assert (await conn.execute(text("SELECT :v"), {"v": "ok"})).scalar() == "ok"
    finally:
        await engine.dispose()


async def test_the_asyncpg_pool_refuses_a_json_document_with_nul(database_url: str) -> None:
    pool = await create_pool(DatabaseSettings(url=database_url))  # type: ignore[arg-type]
    try:
        with pytest.raises(InvalidInputError, match="NUL"):
            # What the job stores (PgJobIntake, PgJobStore) run their statements with.
            await _Pg(pool)._fetchrow("SELECT $1::jsonb", {"m": "a\x00b"})
        stored = await pool.fetchval("SELECT $1::jsonb::text", {"m": "é😀", "b": "\\u0000"})
        assert stored == '{"b": "\\\\u0000", "m": "é😀"}'
    finally:
        await pool.close()
