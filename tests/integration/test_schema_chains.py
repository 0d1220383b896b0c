"""The platform's chain beside other chains in one database: a database of jobrail 0.1's
single chain is adopted, a host's own Alembic chain (in `alembic_version`) and jobrail's
never disturb each other, and `jobrail migrate` fails in one line."""

import asyncio
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from alembic import command
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

from contexts.schema import metadata as contexts_metadata
from jobrail.cli.schema import migrate
from jobrail.settings import DatabaseSettings, Settings
from jobrail.store.admin import create_database_if_missing, drop_database
from jobrail.store.schema import (
    LEGACY_VERSION_TABLE,
    PLATFORM,
    MigrationChain,
    alembic_config,
    upgrade,
)
from jobrail.store.tables import metadata
from tests.support.apps import REFERENCE
from tests.support.host_chain import host_config
from tests.support.schema import (
    PLATFORM_TABLES,
    contexts_head,
    differences,
    platform_head,
    tables,
)
from tests.support.services import PG_SERVER, require

LEGACY = MigrationChain(
    name="jobrail 0.1",
    location=Path(__file__).resolve().parents[1] / "support" / "legacy_migrations",
    version_table=LEGACY_VERSION_TABLE,
)
NOW = "'2026-12-01 00:00:00+00:00'"


@pytest.fixture(params=["sqlite", "postgres"])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite+aiosqlite:///{tmp_path}/chains.db"
        return
    require("postgres")
    url = f"{PG_SERVER}/jobrail_chains_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    asyncio.run(create_database_if_missing(url))
    yield url
    asyncio.run(drop_database(url))


def _sql(url: str, *statements: str) -> list[Any]:
    """Run `statements` in one transaction; the rows of the last."""

    async def run() -> list[Any]:
        engine = create_async_engine(url)
        rows: list[Any] = []
        async with engine.begin() as conn:
            for statement in statements:
                result = await conn.execute(text(statement))
                rows = list(result.all()) if result.returns_rows else []
        await engine.dispose()
        return rows

    return asyncio.run(run())


def _version(url: str, table: str) -> list[str]:
    return [row[0] for row in _sql(url, f"SELECT version_num FROM {table}")]


def _migrate(url: str) -> None:
    migrate(Settings(database={"url": url}), REFERENCE)  # type: ignore[arg-type]


def _job_row(job_id: str) -> str:
    return (
        "INSERT INTO jobs (id, tenant_id, type, queue, status, payload, attempts, "
        "max_attempts, trace_context, cancel_requested, created_at, updated_at) VALUES "
        f"('{job_id}', 'demo', 'demo.echo', 'jobs.default', 'succeeded', '{{}}', 1, 3, "
        f"'{{}}', false, {NOW}, {NOW})"
    )


@pytest.mark.parametrize("old", ["0009", "0006", "0001"])
def test_a_database_of_the_single_chain_is_adopted_with_its_rows(database: str, old: str) -> None:
    command.upgrade(alembic_config(LEGACY, database), old)
    job_id = "00000000-0000-0000-0000-00000000000a"
    rows = [_job_row(job_id)]
    if old >= "0002":
        rows.append(
            "INSERT INTO billing_invoices (id, tenant_id, customer_id, customer_email, "
            "currency, status, total_minor, created_at) VALUES "
            f"('00000000-0000-0000-0000-00000000000b', 'demo', 'c-1', 'ada@example.com', "
            f"'EUR', 'draft', 100, {NOW})"
        )
    if old >= "0005":
        rows += [
            f"INSERT INTO tenants (id, admin, created_at) VALUES ('demo', true, {NOW})",
            "INSERT INTO api_keys (id, tenant_id, digest, hint, created_at) VALUES "
            f"('00000000-0000-0000-0000-00000000000c', 'demo', '{'a' * 64}', 'demo-key…', "
            f"{NOW})",
        ]
    _sql(database, *rows)

    _migrate(database)
    _migrate(database)  # and again: nothing left to do

    assert _version(database, "jobrail_alembic_version") == [platform_head()]
    assert _version(database, "contexts_alembic_version") == [contexts_head()]
    assert _version(database, LEGACY_VERSION_TABLE) == [old]  # left for an older release
    assert _sql(database, "SELECT type, status FROM jobs") == [("demo.echo", "succeeded")]
    invoices = _sql(database, "SELECT customer_id FROM billing_invoices")
    assert invoices == ([("c-1",)] if old >= "0002" else [])
    # Revisions after the adopted one ran: 0009 cut hints stored by the old rule.
    hints = {"0009": [("demo-key…",)], "0006": [("de…",)], "0001": []}[old]
    assert _sql(database, "SELECT hint FROM api_keys") == hints
    assert differences(database, metadata, contexts_metadata) == []


def test_a_host_alembic_version_without_the_platform_tables_is_not_adopted(database: str) -> None:
    _sql(
        database,
        "CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL PRIMARY KEY)",
        "INSERT INTO alembic_version VALUES ('0005')",
    )

    upgrade(DatabaseSettings(url=database))  # type: ignore[arg-type]

    assert tables(database) >= PLATFORM_TABLES
    assert _version(database, "jobrail_alembic_version") == [platform_head()]
    assert _version(database, LEGACY_VERSION_TABLE) == ["0005"]


@pytest.mark.parametrize("host_first", [True, False], ids=["host-first", "jobrail-first"])
def test_a_host_chain_and_the_platform_chain_share_one_database(
    database: str, tmp_path: Path, host_first: bool
) -> None:
    host = host_config(tmp_path, database)
    platform = DatabaseSettings(url=database)  # type: ignore[arg-type]

    if host_first:
        command.upgrade(host, "head")
        upgrade(platform)
    else:
        upgrade(platform)
        command.upgrade(host, "head")

    assert tables(database) == {
        *PLATFORM_TABLES,
        "jobrail_alembic_version",
        "orders",
        "alembic_version",
    }
    assert _version(database, "alembic_version") == ["0001"]
    assert _version(database, PLATFORM.version_table) == [platform_head()]
    _sql(database, _job_row("00000000-0000-0000-0000-0000000000d1"))

    command.downgrade(host, "base")

    assert tables(database) == {*PLATFORM_TABLES, "jobrail_alembic_version", "alembic_version"}
    assert _version(database, "alembic_version") == []
    assert _version(database, PLATFORM.version_table) == [platform_head()]
    assert _sql(database, "SELECT count(*) FROM jobs") == [(1,)]
    assert differences(database, metadata) == []

    upgrade(platform)  # nothing to do, whatever the host's chain holds
    command.upgrade(host, "head")

    assert _version(database, "alembic_version") == ["0001"]
    assert _version(database, PLATFORM.version_table) == [platform_head()]


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("postgresql+asyncpg://postgres@127.0.0.1:1/jobrail", "ConnectionRefusedError"),
        (f"{PG_SERVER}/jobrail_missing_{uuid.uuid4().hex[:8]}", "does not exist"),
    ],
    ids=["unreachable", "no-database"],
)
def test_jobrail_migrate_fails_in_one_line(url: str, says: str, tmp_path: Path) -> None:
    if "127.0.0.1:5432" in url:
        require("postgres")
    root = Path(__file__).resolve().parents[2]
    path = os.pathsep.join([str(root / "src"), str(root), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "PYTHONPATH": path, "JOBRAIL_DATABASE__URL": url}
    done = subprocess.run(
        [sys.executable, "-m", "jobrail.cli", "migrate"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("jobrail: cannot migrate the database:")
    assert says in lines[0]
