"""A host's own Alembic chain in jobrail's database: its autogenerate compares the host's
tables and leaves jobrail's alone (`jobrail.sql.exclude_jobrail_tables`), those of the
platform's chain and of the modules' (the reference contexts'), with their version
tables; on SQLite, on Postgres, and on Postgres with the platform in its own schema
beside a host table of the same name as one of jobrail's."""

import asyncio
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import Column, Integer, MetaData, String, Table
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import create_async_engine

from jobrail import JobRail
from jobrail.settings import Settings
from jobrail.sql import IncludeObject, exclude_jobrail_tables
from jobrail.store.admin import create_database_if_missing, drop_database
from tests.integration.test_platform_schema import HOST_JOBS_REVISION
from tests.support.apps import REFERENCE
from tests.support.host_chain import HOST_REVISION, host_config
from tests.support.services import PG_SERVER, require

pytestmark = pytest.mark.integration


def host_metadata(*, with_jobs: bool = False) -> MetaData:
    """The host's models, as its chain (tests.support.host_chain) made them."""
    metadata = MetaData()
    Table(
        "orders",
        metadata,
        Column("id", Integer, primary_key=True),
        Column("job_id", String(36)),
    )
    if with_jobs:
        Table(
            "jobs",
            metadata,
            Column("id", Integer, primary_key=True),
            Column("name", String(64), nullable=False),
        )
    return metadata


def autogenerate(
    url: str, metadata: MetaData, include_object: IncludeObject | None, **opts: Any
) -> list[Any]:
    """What the host's `alembic revision --autogenerate` would write."""

    def compare(connection: Connection) -> list[Any]:
        options = {"include_object": include_object, **opts} if include_object else opts
        return list(
            compare_metadata(MigrationContext.configure(connection, opts=options), metadata)
        )

    async def run() -> list[Any]:
        engine = create_async_engine(url)
        try:
            async with engine.connect() as connection:
                return await connection.run_sync(compare)
        finally:
            await engine.dispose()

    return asyncio.run(run())


def dropped(changes: list[Any]) -> set[str]:
    return {change[1].name for change in changes if change[0] == "remove_table"}


@pytest.fixture
def postgres() -> Iterator[str]:
    require("postgres")
    url = f"{PG_SERVER}/jobrail_hostgen_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    asyncio.run(create_database_if_missing(url))
    yield url
    asyncio.run(drop_database(url))


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_the_hosts_autogenerate_sees_its_own_tables_only(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    url = (
        f"sqlite+aiosqlite:///{tmp_path}/shared.db"
        if backend == "sqlite"
        else request.getfixturevalue("postgres")
    )
    rail = JobRail(Settings(database={"url": url}), modules=REFERENCE)  # type: ignore[arg-type]
    asyncio.run(rail.migrate())
    command.upgrade(host_config(tmp_path, url), "head")

    unfiltered = autogenerate(url, host_metadata(), None)
    filtered = autogenerate(url, host_metadata(), exclude_jobrail_tables(rail))

    # Without the filter it would drop the platform's tables, the contexts' and both
    # version tables; with it, the host's models and its database agree.
    assert {"jobs", "tenants", "jobrail_alembic_version", "billing_invoices"} <= dropped(unfiltered)
    assert "contexts_alembic_version" in dropped(unfiltered)
    assert filtered == []


def test_with_the_platform_in_its_own_schema_the_hosts_jobs_table_is_its_own(
    postgres: str, tmp_path: Path
) -> None:
    revisions = {"0001_orders.py": HOST_REVISION, "0002_jobs.py": HOST_JOBS_REVISION}
    command.upgrade(host_config(tmp_path, postgres, revisions), "head")
    settings = Settings(database={"url": postgres, "schema": "jobrail"})  # type: ignore[arg-type]
    rail = JobRail(settings, modules=REFERENCE)
    asyncio.run(rail.migrate())
    include = exclude_jobrail_tables(rail)

    every_schema = autogenerate(
        postgres, host_metadata(with_jobs=True), include, include_schemas=True
    )
    without_jobs = autogenerate(postgres, host_metadata(), include, include_schemas=True)

    assert every_schema == []  # jobrail.jobs left out, public.jobs compared as the host's
    assert dropped(without_jobs) == {"jobs"}
    (change,) = [c for c in without_jobs if c[0] == "remove_table"]
    assert change[1].schema is None  # public.jobs, not jobrail's
