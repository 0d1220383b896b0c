"""Alembic is the only schema path: migrations go up and down, and match the tables in code.

Two chains: the platform's (inside the package) and the reference contexts' (migrations/),
each with its own version table."""

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from alembic import command
from alembic.config import Config
from alembic.script import ScriptDirectory
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

from contexts.schema import SCHEMA
from contexts.schema import metadata as contexts_metadata
from jobrail.cli.schema import migrate
from jobrail.settings import Settings
from jobrail.store.admin import create_database_if_missing, drop_database
from jobrail.store.schema import PLATFORM, MigrationChain, alembic_config
from jobrail.store.tables import metadata
from tests.support.apps import REFERENCE
from tests.support.schema import PLATFORM_TABLES, differences, tables
from tests.support.services import PG_SERVER, require


def _config(url: str, chain: MigrationChain = PLATFORM) -> Config:
    return alembic_config(chain, url)


@pytest.fixture(params=["sqlite", "postgres"])
def empty_database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite+aiosqlite:///{tmp_path}/stairway.db"
        return
    require("postgres")
    url = f"{PG_SERVER}/jobrail_stairway"
    asyncio.run(drop_database(url))
    asyncio.run(create_database_if_missing(url))
    yield url
    asyncio.run(drop_database(url))


def test_every_migration_goes_up_down_and_up_again(empty_database: str) -> None:
    for chain in (PLATFORM, SCHEMA):  # the contexts' chain runs on a migrated platform
        config = _config(empty_database, chain)
        revisions = list(ScriptDirectory.from_config(config).walk_revisions("base", "heads"))
        for revision in reversed(revisions):
            command.upgrade(config, revision.revision)
            command.downgrade(config, revision.down_revision or "base")
            command.upgrade(config, revision.revision)


def test_the_migrated_schema_matches_the_tables_in_code(empty_database: str) -> None:
    migrate(Settings(database={"url": empty_database}), REFERENCE)  # type: ignore[arg-type]

    assert differences(empty_database, metadata, contexts_metadata) == []


def test_the_platform_chain_holds_the_platform_tables_alone(empty_database: str) -> None:
    command.upgrade(_config(empty_database), "heads")

    assert tables(empty_database) == {*PLATFORM_TABLES, "jobrail_alembic_version"}
    assert set(metadata.tables) == PLATFORM_TABLES
    assert differences(empty_database, metadata) == []


def test_the_contexts_chain_holds_the_contexts_tables_and_goes_down_to_the_platform(
    empty_database: str,
) -> None:
    migrate(Settings(database={"url": empty_database}), REFERENCE)  # type: ignore[arg-type]
    contexts_tables = set(contexts_metadata.tables)
    assert contexts_tables == {
        "billing_invoices",
        "billing_invoice_lines",
        "billing_month_end_runs",
        "notifications",
        "sync_accounts",
        "sync_items",
    }
    assert tables(empty_database) == {
        *PLATFORM_TABLES,
        *contexts_tables,
        "jobrail_alembic_version",
        "contexts_alembic_version",
    }

    command.downgrade(_config(empty_database, SCHEMA), "base")

    assert tables(empty_database) == {
        *PLATFORM_TABLES,
        "jobrail_alembic_version",
        "contexts_alembic_version",
    }
    assert differences(empty_database, metadata) == []


def test_hints_stored_by_the_old_rule_are_cut_unless_shaped_like_a_generated_key(
    empty_database: str,
) -> None:
    config = _config(empty_database)
    command.upgrade(config, "0008")

    async def run(statements: list[str]) -> list[tuple[str, str]]:
        engine = create_async_engine(empty_database)
        async with engine.begin() as conn:
            for statement in statements:
                await conn.execute(text(statement))
            rows = (await conn.execute(text("SELECT tenant_id, hint FROM api_keys"))).all()
        await engine.dispose()
        return sorted((row[0], row[1]) for row in rows)

    now = "'2026-12-01 00:00:00+00:00'"
    asyncio.run(
        run(
            [
                f"INSERT INTO tenants (id, admin, created_at) VALUES ('demo', true, {now})",
                *(
                    f"INSERT INTO api_keys (id, tenant_id, digest, hint, created_at) VALUES "
                    f"('{key_id}', 'demo', '{digest}', '{hint}', {now})"
                    for key_id, digest, hint in [
                        ("00000000-0000-0000-0000-000000000001", "a" * 64, "demo-key…"),
                        ("00000000-0000-0000-0000-000000000002", "b" * 64, "jr_Ab3-_z…"),
                    ]
                ),
            ]
        )
    )

    command.upgrade(config, "head")

    assert asyncio.run(run([])) == [("demo", "de…"), ("demo", "jr_Ab3-_z…")]


def test_0016_goes_down_and_up_with_tenants_keys_and_an_expired_job_in_place(
    empty_database: str,
) -> None:
    config = _config(empty_database)
    command.upgrade(config, "0016")

    async def write(statements: list[str]) -> list[object]:
        engine = create_async_engine(empty_database)
        try:
            async with engine.begin() as conn:
                answers = []
                for sql in statements:
                    result = await conn.execute(text(sql))
                    answers.append(result.scalar() if result.returns_rows else None)
        finally:
            await engine.dispose()
        return answers

    now = "'2026-12-06 00:00:00'"
    asyncio.run(
        write(
            [
                "INSERT INTO tenants (id, admin, created_at, max_queued) "
                f"VALUES ('a', false, {now}, 5)",
                "INSERT INTO api_keys (id, tenant_id, digest, hint, created_at) VALUES "
                f"('00000000000000000000000000000001', 'a', 'd', 'h', {now})",
                "INSERT INTO jobs (id, tenant_id, type, queue, status, payload, attempts, "
                "max_attempts, trace_context, cancel_requested, created_at, updated_at, "
                "deadline) VALUES ('00000000000000000000000000000002', 'a', 't', 'q', "
                f"'expired', '{{}}', 0, 1, '{{}}', false, {now}, {now}, {now})",
            ]
        )
    )

    command.downgrade(config, "0015")
    command.upgrade(config, "head")

    [tenants, keys, jobs_left] = asyncio.run(
        write(
            [
                "SELECT count(*) FROM tenants WHERE max_queued IS NULL",
                "SELECT count(*) FROM api_keys",
                "SELECT count(*) FROM jobs",
            ]
        )
    )
    assert (tenants, keys, jobs_left) == (1, 1, 0)  # an expired job has no older status


def test_0017_refuses_to_go_down_while_jobs_wait_for_the_dispatcher(
    empty_database: str,
) -> None:
    config = _config(empty_database)
    command.upgrade(config, "head")

    async def run(sql: str) -> object:
        engine = create_async_engine(empty_database)
        try:
            async with engine.begin() as conn:
                result = await conn.execute(text(sql))
                return result.scalar() if result.returns_rows else None
        finally:
            await engine.dispose()

    now = "'2026-12-06 00:00:00'"
    asyncio.run(
        run(
            "INSERT INTO jobs (id, tenant_id, type, queue, status, payload, attempts, "
            "max_attempts, trace_context, cancel_requested, created_at, updated_at, "
            "held_since, rank_at) VALUES ('00000000000000000000000000000003', 'a', 't', 'q', "
            f"'pending', '{{}}', 0, 1, '{{}}', false, {now}, {now}, {now}, {now})"
        )
    )

    with pytest.raises(RuntimeError, match="1 jobs wait for the dispatcher"):
        command.downgrade(config, "0016")
    assert asyncio.run(run("SELECT count(*) FROM jobs WHERE held_since IS NOT NULL")) == 1

    asyncio.run(run("UPDATE jobs SET held_since = NULL"))  # released
    command.downgrade(config, "0016")
    command.upgrade(config, "head")
    # The job events' triggers (0013) are still there: a change of status is an event.
    before = asyncio.run(run("SELECT count(*) FROM job_events"))
    asyncio.run(run("UPDATE jobs SET status = 'cancelled'"))
    assert asyncio.run(run("SELECT count(*) FROM job_events")) == before + 1  # type: ignore[operator]
