"""A host app adopting jobrail from the README alone, in the embedded mode: no demo key in
its database, its sessions on jobrail's database, migrated from its own test suite, one
line on a database it forgot to migrate, and jobrail's log lines in its own logging."""

import logging
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from pydantic import BaseModel
from sqlalchemy import Column, MetaData, String, Table, event, func, select, text
from sqlalchemy.ext.asyncio import AsyncEngine

from jobrail import JobContext, JobRail, SchemaNotMigratedError, TransientError
from jobrail.store.tables import jobs, tenants
from tests.api.test_facade import finished
from tests.support.apps import REFERENCE


class Report(BaseModel):
    report_id: str
    fail_times: int = 0


def declare(rail: JobRail) -> Any:
    @rail.job("reports.render", payload=Report, max_attempts=3, retry_base_s=0.01)
    async def render(payload: Report, ctx: JobContext) -> dict[str, int]:
        if ctx.attempt <= payload.fail_times:
            raise TransientError(f"the renderer is busy (attempt {ctx.attempt})")
        return {"attempt": ctx.attempt}

    return render


def client(app: FastAPI) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://host")


@pytest.fixture
def host_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """A host's environment: its database and nothing else of jobrail's settings."""
    monkeypatch.delenv("JOBRAIL_MODULES", raising=False)
    monkeypatch.setenv("JOBRAIL_ENVIRONMENT", "test")
    monkeypatch.setenv("JOBRAIL_SCHEDULER__EMBEDDED", "false")
    monkeypatch.setenv("JOBRAIL_DATABASE__URL", f"sqlite+aiosqlite:///{tmp_path}/host.db")
    return tmp_path / "host.db"


# -- the demo key -------------------------------------------------------------------------


@pytest.mark.parametrize("modules", [None, ""], ids=["JOBRAIL_MODULES unset", "empty"])
async def test_the_mounted_app_of_a_host_knows_no_demo_key(
    host_env: Path, monkeypatch: pytest.MonkeyPatch, modules: str | None
) -> None:
    if modules is not None:
        monkeypatch.setenv("JOBRAIL_MODULES", modules)
    rail = JobRail()
    await rail.migrate()
    host = FastAPI(lifespan=rail.lifespan)
    host.mount("/jobrail", rail.app())
    demo = {"Authorization": "Bearer demo-key"}

    async with host.router.lifespan_context(host), client(host) as http:
        overview = await http.get("/jobrail/admin/overview", headers=demo)
        echo = await http.post("/jobrail/demo/echo", json={"message": "hi"}, headers=demo)
        async with rail.session() as session:
            seeded = (await session.execute(select(tenants.c.id))).scalars().all()

    assert overview.status_code == 401, overview.text
    assert echo.status_code == 404, echo.text
    assert seeded == []


async def test_a_host_that_names_the_demo_gets_it_and_its_key(
    host_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("JOBRAIL_MODULES", "demo")
    rail = JobRail()
    await rail.migrate()
    host = FastAPI(lifespan=rail.lifespan)
    host.mount("/jobrail", rail.app())
    demo = {"Authorization": "Bearer demo-key"}

    async with host.router.lifespan_context(host), client(host) as http:
        echo = await http.post("/jobrail/demo/echo", json={"message": "hi"}, headers=demo)

    assert echo.status_code == 202, echo.text


# -- migrating from the test suite, and forgetting to -------------------------------------


async def test_a_test_suite_migrates_in_process_then_a_job_runs(host_env: Path) -> None:
    rail = JobRail(modules=REFERENCE)  # a module with an Alembic chain of its own
    render = declare(rail)

    await rail.migrate()
    async with rail.lifespan():
        result = await render.enqueue(Report(report_id="r-1"), tenant_id="acme")
        job = await finished(rail, "acme", result.job.id)
        async with rail.session() as session:
            tables = (
                await session.execute(text("SELECT name FROM sqlite_master WHERE type='table'"))
            ).scalars()
            names = set(tables)

    assert (job.status.value, job.result) == ("succeeded", {"attempt": 1})
    assert {"jobs", "jobrail_alembic_version", "billing_invoices"} <= names
    assert "contexts_alembic_version" in names


@pytest.mark.parametrize("database", ["missing", "empty"])
async def test_a_lifespan_on_a_database_never_migrated_says_so_in_one_line(
    host_env: Path, database: str
) -> None:
    if database == "empty":  # what a host's own engine leaves: a file, no jobrail tables
        host_env.touch()
    rail = JobRail()
    render = declare(rail)

    with pytest.raises(SchemaNotMigratedError) as refused:
        async with rail.lifespan():
            pass

    message = str(refused.value)
    assert message.startswith("jobrail's database is not migrated: "), message
    assert "jobrail migrate" in message
    assert "await rail.migrate()" in message
    assert "\n" not in message
    assert refused.value.__cause__ is None
    assert refused.value.__context__ is None
    assert isinstance(refused.value, RuntimeError)

    await rail.migrate()  # then the same rail serves
    async with rail.lifespan():
        result = await render.enqueue(Report(report_id="r-1"), tenant_id="acme")
        job = await finished(rail, "acme", result.job.id)
    assert job.status.value == "succeeded"


# -- the host's sessions ------------------------------------------------------------------

orders = Table("orders", MetaData(), Column("id", String(16), primary_key=True))


async def test_the_rails_sessions_share_the_hosts_transaction_and_close_with_it(
    host_env: Path,
) -> None:
    rail = JobRail()
    render = declare(rail)
    await rail.migrate()
    used: set[int] = set()
    closed: set[int] = set()

    async with rail.lifespan():
        engine = await rail.container.get(AsyncEngine)
        event.listen(engine.sync_engine, "checkout", lambda conn, *_: used.add(id(conn)))
        event.listen(engine.sync_engine, "close", lambda conn, _: closed.add(id(conn)))
        async with rail.session() as session, session.begin():
            await session.run_sync(lambda sync: orders.create(sync.connection()))
        async with rail.session() as session:
            await session.execute(orders.insert().values(id="o-1"))
            kept = await render.enqueue(Report(report_id="o-1"), tenant_id="acme", session=session)
            await session.commit()
        async with rail.session() as session:
            await session.execute(orders.insert().values(id="o-2"))
            await render.enqueue(Report(report_id="o-2"), tenant_id="acme", session=session)
            await session.rollback()
        job = await finished(rail, "acme", kept.job.id)
        async with rail.session() as session:
            counted = await session.scalar(select(func.count()).select_from(orders))
            queued = await session.scalar(select(func.count()).select_from(jobs))

    assert job.status.value == "succeeded"
    assert (counted, queued) == (1, 1)
    assert used  # the host's sessions ran on the rail's engine ...
    assert used <= closed  # ... whose connections closed with the lifespan


# -- jobrail's lines in the host's logging ----------------------------------------------


def _logging_setup() -> tuple[object, ...]:
    root = logging.getLogger()
    return (tuple(root.handlers), root.level, logging.getLogger("uvicorn").level)


async def test_a_retried_job_is_in_the_logs_of_a_host_that_set_nothing_up(
    host_env: Path, caplog: pytest.LogCaptureFixture
) -> None:
    rail = JobRail()
    render = declare(rail)
    await rail.migrate()
    before = _logging_setup()

    async with rail.lifespan():
        result = await render.enqueue(Report(report_id="r-1", fail_times=1), tenant_id="acme")
        job = await finished(rail, "acme", result.job.id)

    retried = [
        r
        for r in caplog.records
        if r.name.startswith("jobrail.") and str(result.job.id) in r.getMessage()
    ]
    assert job.attempts == 2
    assert [r.levelname for r in retried] == ["WARNING"], [r.getMessage() for r in retried]
    assert "attempt 1 failed (TransientError: the renderer is busy (attempt 1))" in (
        retried[0].getMessage()
    )
    # jobrail took nothing of the host's logging over: no handler, no level, and its own
    # loggers hand every line to the host's.
    assert _logging_setup() == before
    own = logging.getLogger("jobrail")
    assert (own.handlers, own.level, own.propagate) == ([], logging.NOTSET, True)
