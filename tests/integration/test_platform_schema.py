"""JOBRAIL_DATABASE__SCHEMA: `jobrail migrate` puts the platform's tables and their
version table in that Postgres schema, beside a host's own chain and a host table of the
same name as one of them (``jobs``); jobs enqueued on their own and in the host's own
session run and read back from there."""

import asyncio
import os
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Annotated, Any

import httpx
import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.migration import MigrationContext
from fastapi import FastAPI, Header, HTTPException
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine, async_sessionmaker, create_async_engine

from contexts.schema import metadata as contexts_metadata
from jobrail import JobRail
from jobrail.cli.schema import migrate
from jobrail.kernel.ids import TenantId
from jobrail.settings import DatabaseSettings, Settings
from jobrail.store.admin import create_database_if_missing, drop_database
from jobrail.store.engine import create_engine
from jobrail.store.schema import PLATFORM, MigrationError
from jobrail.store.tables import metadata
from jobrail.tenants.use_cases import CreateTenant
from tests.support.apps import REFERENCE
from tests.support.host_app import RenderReport, declare_jobs
from tests.support.host_chain import HOST_REVISION, host_config
from tests.support.schema import PLATFORM_TABLES, contexts_head, platform_head
from tests.support.services import PG_SERVER, require, wait_for

pytestmark = pytest.mark.integration

SCHEMA = "jobrail"

# The host has a table of its own named as one of the platform's.
HOST_JOBS_REVISION = """
import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade():
    op.create_table(
        "jobs",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("name", sa.String(64), nullable=False),
    )


def downgrade():
    op.drop_table("jobs")
"""


@pytest.fixture
def database() -> Iterator[str]:
    require("postgres")
    url = f"{PG_SERVER}/jobrail_pschema_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    asyncio.run(create_database_if_missing(url))
    yield url
    asyncio.run(drop_database(url))


@pytest.fixture
def host_chain(database: str, tmp_path: Path) -> Config:
    revisions = {"0001_orders.py": HOST_REVISION, "0002_jobs.py": HOST_JOBS_REVISION}
    return host_config(tmp_path, database, revisions)


def _settings(url: str, **values: Any) -> Settings:
    return Settings(database={"url": url, "schema": SCHEMA}, **values)


@pytest.fixture
def migrated(database: str, host_chain: Config) -> str:
    command.upgrade(host_chain, "head")
    migrate(_settings(database), REFERENCE)  # the platform's chain, then the contexts'
    return database


async def _rows(url: str, statement: str) -> list[Any]:
    engine = create_async_engine(url)  # the database's default search path
    try:
        async with engine.connect() as conn:
            return list((await conn.execute(text(statement))).all())
    finally:
        await engine.dispose()


def _schemas_of_tables(url: str) -> dict[str, set[str]]:
    rows = asyncio.run(
        _rows(
            url,
            "SELECT tablename, schemaname FROM pg_tables WHERE schemaname NOT IN "
            "('pg_catalog', 'information_schema')",
        )
    )
    found: dict[str, set[str]] = {}
    for table, schema in rows:
        found.setdefault(table, set()).add(schema)
    return found


def _version(url: str, table: str) -> list[str]:
    return [row[0] for row in asyncio.run(_rows(url, f"SELECT version_num FROM {table}"))]


def test_migrate_puts_the_platform_tables_in_the_schema_alone(
    migrated: str, host_chain: Config
) -> None:
    migrate(_settings(migrated), REFERENCE)  # and again: nothing left to do

    found = _schemas_of_tables(migrated)
    assert {table: found[table] for table in PLATFORM_TABLES - {"jobs"}} == {
        table: {SCHEMA} for table in PLATFORM_TABLES - {"jobs"}
    }
    assert found["jobs"] == {SCHEMA, "public"}  # the platform's, and the host's own
    assert found["jobrail_alembic_version"] == {SCHEMA}
    assert found["alembic_version"] == found["orders"] == {"public"}
    assert found["contexts_alembic_version"] == {"public"}
    assert {table: found[table] for table in contexts_metadata.tables} == {
        table: {"public"} for table in contexts_metadata.tables
    }
    assert _version(migrated, f"{SCHEMA}.jobrail_alembic_version") == [platform_head()]
    assert _version(migrated, "public.contexts_alembic_version") == [contexts_head()]
    assert _version(migrated, "public.alembic_version") == ["0002"]

    indexes = asyncio.run(_rows(migrated, "SELECT schemaname, indexname FROM pg_indexes"))
    platform_indexes = {index.name for table in metadata.tables.values() for index in table.indexes}
    assert platform_indexes <= {name for schema, name in indexes if schema == SCHEMA}
    assert not platform_indexes & {name for schema, name in indexes if schema != SCHEMA}
    # What the platform's chain made in the schema is what its tables in code describe.
    assert asyncio.run(_differences(migrated)) == []

    # The host's chain comes and goes without touching the platform's tables.
    command.downgrade(host_chain, "base")
    assert _schemas_of_tables(migrated)["jobs"] == {SCHEMA}
    command.upgrade(host_chain, "head")
    assert _version(migrated, f"{SCHEMA}.jobrail_alembic_version") == [platform_head()]


def test_a_database_migrated_without_the_schema_is_refused_until_its_tables_move(
    database: str,
) -> None:
    migrate(Settings(database={"url": database}, modules=[]))
    job = "00000000-0000-0000-0000-0000000000e1"
    asyncio.run(
        _execute(
            database,
            "INSERT INTO jobs (id, tenant_id, type, queue, status, payload, attempts, "
            "max_attempts, trace_context, cancel_requested, created_at, updated_at) VALUES "
            f"('{job}', 'acme', 'reports.render', 'jobs.default', 'succeeded', '{{}}', 1, 3, "
            "'{}', false, now(), now())",
        )
    )

    with pytest.raises(MigrationError, match="default schema, not in 'jobrail': move them"):
        migrate(_settings(database, modules=[]))
    assert SCHEMA not in {
        schema for schemas in _schemas_of_tables(database).values() for schema in schemas
    }

    # What the README says to do.
    moves = [
        f"ALTER TABLE {table} SET SCHEMA {SCHEMA}"
        for table in (*PLATFORM_TABLES, PLATFORM.version_table)
    ]
    asyncio.run(_execute(database, f"CREATE SCHEMA {SCHEMA}", *moves))
    migrate(_settings(database, modules=[]))

    assert asyncio.run(_rows(database, f"SELECT id::text FROM {SCHEMA}.jobs")) == [(job,)]
    assert _version(database, f"{SCHEMA}.jobrail_alembic_version") == [platform_head()]


async def _execute(url: str, *statements: str) -> None:
    engine = create_async_engine(url)
    try:
        async with engine.begin() as conn:
            for statement in statements:
                await conn.execute(text(statement))
    finally:
        await engine.dispose()


async def _differences(url: str) -> list[Any]:
    engine = create_engine(DatabaseSettings(url=url, schema=SCHEMA))

    def compare(sync: Any) -> list[Any]:
        context = MigrationContext.configure(
            sync,
            opts={
                "include_name": lambda name, type_, _: type_ != "table" or name in metadata.tables,
            },
        )
        return list(compare_metadata(context, metadata))

    try:
        async with engine.connect() as conn:
            return await conn.run_sync(compare)
    finally:
        await engine.dispose()


async def host_tenant(x_tenant: Annotated[str | None, Header()] = None) -> TenantId:
    if x_tenant is None:
        raise HTTPException(401, "who are you?")
    return TenantId(x_tenant)


class Host:
    def __init__(self, rail: JobRail, http: httpx.AsyncClient, engine: AsyncEngine) -> None:
        self.rail = rail
        self.render = declare_jobs(rail)
        self.http = http
        self.sessions = async_sessionmaker(engine, expire_on_commit=False)

    async def finished(self, job_id: str) -> dict[str, Any]:
        async def done() -> dict[str, Any] | None:
            response = await self.http.get(f"/jobs/{job_id}", headers={"X-Tenant": "acme"})
            assert response.status_code == 200, response.text
            body: dict[str, Any] = response.json()
            return body if body["finished_at"] is not None else None

        found: dict[str, Any] = await wait_for(done, timeout=20, what=f"job {job_id}")
        return found


@pytest.fixture
async def host(migrated: str) -> AsyncIterator[Host]:
    """A host app on the embedded mode (its in-process worker) over Postgres, with its
    own engine and sessions on the same database, on the default search path."""
    rail = JobRail(
        _settings(
            migrated,
            mode="embedded",
            environment="test",
            modules=[],
            scheduler={"embedded": False},  # no housekeeping jobs among those counted
            retry={"base_s": 0.05, "jitter": "none"},
        )
    )
    app = FastAPI(lifespan=rail.lifespan)
    engine = create_async_engine(migrated)
    host = Host(
        rail,
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://host"),
        engine,
    )
    app.include_router(rail.router(tenant=host_tenant))
    app.include_router(rail.router(prefix="/keyed/jobs"))  # jobrail's API keys
    try:
        async with app.router.lifespan_context(app), host.http:
            yield host
    finally:
        await engine.dispose()


async def test_jobs_enqueued_alone_and_in_the_host_session_run_in_the_schema(host: Host) -> None:
    alone = await host.render.enqueue(RenderReport(report_id="r-1", pages=2), tenant_id="acme")
    async with host.sessions() as session:
        await session.execute(text("INSERT INTO jobs (id, name) VALUES (1, 'the host''s row')"))
        in_session = await host.render.enqueue(
            RenderReport(report_id="r-2", pages=3), tenant_id="acme", session=session
        )
        await session.commit()
    again = await host.render.enqueue(
        RenderReport(report_id="r-1", pages=2), tenant_id="acme", idempotency_key="k-1"
    )
    same = await host.render.enqueue(
        RenderReport(report_id="r-1", pages=2), tenant_id="acme", idempotency_key="k-1"
    )

    done = [await host.finished(str(result.job.id)) for result in (alone, in_session, again)]
    issued = await (await host.rail.container.get(CreateTenant))("acme")
    keyed = await host.http.get(
        f"/keyed/jobs/{in_session.job.id}", headers={"Authorization": f"Bearer {issued.api_key}"}
    )
    listed = await host.http.get("/jobs", headers={"X-Tenant": "acme"})

    assert [(job["status"], job["result"]) for job in done] == [
        ("succeeded", {"pages": 2, "attempt": 1}),
        ("succeeded", {"pages": 3, "attempt": 1}),
        ("succeeded", {"pages": 2, "attempt": 1}),
    ]
    assert (same.created, same.job.id) == (False, again.job.id)
    assert (keyed.status_code, keyed.json()["status"]) == (200, "succeeded")
    assert len(listed.json()["items"]) == 3
    # A published row's mark may wait a moment (at most 0.25 s) for an enqueue statement
    # to carry it, so the last job can finish before its row is marked.
    deadline = time.monotonic() + 5
    while True:
        async with host.sessions() as session:
            platform = (await session.execute(text(f"SELECT status FROM {SCHEMA}.jobs"))).all()
            own = (await session.execute(text("SELECT name FROM public.jobs"))).all()
            unpublished = await session.scalar(
                text(f"SELECT count(*) FROM {SCHEMA}.outbox WHERE published_at IS NULL")
            )
            outbox = await session.scalar(text(f"SELECT count(*) FROM {SCHEMA}.outbox"))
        if unpublished == 0 or time.monotonic() >= deadline:
            break
        await asyncio.sleep(0.05)
    assert platform == [("succeeded",)] * 3
    assert own == [("the host's row",)]
    assert outbox == 3
    assert unpublished == 0
