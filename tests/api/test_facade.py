"""JobRail in embedded mode: job types declared in code, enqueued on their own or in the
host's own session, run by the in-process worker; the rail's lifespan in a host app."""

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel
from sqlalchemy import func, select, text
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker, create_async_engine

from jobrail import JobRail
from jobrail.jobs.domain import Job
from jobrail.jobs.get import GetJob, GetJobQuery
from jobrail.kernel.errors import InvalidInputError
from jobrail.kernel.ids import JobId, TenantId
from jobrail.settings import Settings
from jobrail.store.tables import jobs, outbox
from tests.api.conftest import embedded_settings, migrated
from tests.support.host_app import RenderReport, declare_jobs
from tests.support.services import wait_for


async def rail_settings(tmp_path: Path) -> Settings:
    """No installed module, and the housekeeping schedules not fired, so that the jobs
    these tests count are their own."""
    return await migrated(embedded_settings(tmp_path, modules=[], scheduler={"embedded": False}))


async def job_of(rail: JobRail, tenant: str, job_id: JobId) -> Job:
    async with rail.container() as scope:
        get = await scope.get(GetJob)
        return await get(GetJobQuery(tenant_id=TenantId(tenant), job_id=job_id))


async def finished(rail: JobRail, tenant: str, job_id: JobId) -> Job:
    async def done() -> Job | None:
        job = await job_of(rail, tenant, job_id)
        return job if job.finished_at is not None else None

    result: Job = await wait_for(done, timeout=10, what=f"job {job_id} to finish")
    return result


async def test_a_job_type_declared_on_the_rail_is_enqueued_and_run(tmp_path: Path) -> None:
    rail = JobRail(await rail_settings(tmp_path))
    render = declare_jobs(rail)

    async with rail.lifespan():
        result = await render.enqueue(
            RenderReport(report_id="r-1", pages=3), tenant_id="acme", entity_id="r-1"
        )
        job = await finished(rail, "acme", result.job.id)

    assert result.created
    assert (result.job.type, result.job.entity_id) == ("reports.render", "r-1")
    assert result.job.payload == {"report_id": "r-1", "pages": 3, "permanent_failure": False}
    assert result.job.max_attempts == 6
    assert (job.status.value, job.result) == ("succeeded", {"pages": 3, "attempt": 1})
    assert render.spec.limits.lock is not None


async def test_the_same_idempotency_key_returns_the_first_job(tmp_path: Path) -> None:
    rail = JobRail(await rail_settings(tmp_path))
    render = declare_jobs(rail)

    async with rail.lifespan():
        first = await render.enqueue(
            RenderReport(report_id="r-1"), tenant_id="acme", idempotency_key="k-1"
        )
        again = await render.enqueue(
            RenderReport(report_id="r-1"), tenant_id="acme", idempotency_key="k-1"
        )

    assert first.created
    assert not again.created
    assert again.job.id == first.job.id


async def test_a_payload_of_another_model_is_refused(tmp_path: Path) -> None:
    class Other(BaseModel):
        report_id: str

    rail = JobRail(await rail_settings(tmp_path))
    render = declare_jobs(rail)

    async with rail.lifespan():
        with pytest.raises(InvalidInputError):
            await render.enqueue(Other(report_id="r-1"), tenant_id="acme")  # type: ignore[arg-type]


async def test_job_types_are_declared_before_the_runtime_is_built(tmp_path: Path) -> None:
    rail = JobRail(await rail_settings(tmp_path))
    declare_jobs(rail)
    with pytest.raises(ValueError, match="declared twice"):
        declare_jobs(rail)

    rail.build()
    try:
        with pytest.raises(RuntimeError, match="after the runtime was built"):

            @rail.job("reports.late", payload=RenderReport)
            async def late(payload: RenderReport, ctx: Any) -> None:
                return None
    finally:
        await rail.container.close()

    assert rail.runtime.registry.spec("reports.render") is not None


def test_settings_come_from_the_environment_by_default(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("JOBRAIL_MODULES", "")
    monkeypatch.setenv("JOBRAIL_DATABASE__URL", f"sqlite+aiosqlite:///{tmp_path}/env.db")

    rail = JobRail()

    assert rail.settings.modules == []
    assert rail.settings.database.url.get_secret_value().endswith("/env.db")


# -- the host's own session ----------------------------------------------------------


@pytest.fixture
async def host_sessions(tmp_path: Path) -> AsyncIterator[async_sessionmaker[AsyncSession]]:
    """The host's own engine and sessions, on jobrail's database."""
    engine = create_async_engine(f"sqlite+aiosqlite:///{tmp_path}/jobrail.db")
    async with engine.begin() as conn:
        await conn.execute(text("CREATE TABLE orders (id TEXT PRIMARY KEY)"))
    yield async_sessionmaker(engine, expire_on_commit=False)
    await engine.dispose()


async def counts(sessions: async_sessionmaker[AsyncSession]) -> tuple[int, int, int]:
    async with sessions() as session:
        orders = (await session.execute(text("SELECT count(*) FROM orders"))).scalar_one()
        job_rows = (await session.execute(select(func.count()).select_from(jobs))).scalar_one()
        outbox_rows = (await session.execute(select(func.count()).select_from(outbox))).scalar_one()
    return orders, job_rows, outbox_rows


class Published:
    """The envelopes the rail's broker was handed, one at a time or as a batch (it
    publishes them as well)."""

    def __init__(self, rail: JobRail, monkeypatch: pytest.MonkeyPatch) -> None:
        self.job_ids: list[str] = []
        broker: Any = rail.runtime.job_broker
        publish, publish_many = broker.publish, broker.publish_many

        def record(envelope: Any) -> None:
            self.job_ids.append(envelope.headers.get("jobrail-job-id") or envelope.id)

        async def recording(envelope: Any) -> None:
            record(envelope)
            await publish(envelope)

        async def recording_many(envelopes: Any, timeout_s: float | None = None) -> Any:
            for envelope in envelopes:
                record(envelope)
            return await publish_many(envelopes, timeout_s)

        monkeypatch.setattr(broker, "publish", recording)
        monkeypatch.setattr(broker, "publish_many", recording_many)


async def test_a_job_enqueued_in_the_host_session_commits_with_it(
    tmp_path: Path,
    host_sessions: async_sessionmaker[AsyncSession],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rail = JobRail(await rail_settings(tmp_path))
    render = declare_jobs(rail)

    async with rail.lifespan():
        published = Published(rail, monkeypatch)
        async with host_sessions() as session:
            await session.execute(text("INSERT INTO orders VALUES ('o-1')"))
            result = await render.enqueue(
                RenderReport(report_id="r-1"), tenant_id="acme", session=session
            )
            assert published.job_ids == []  # nothing leaves before the host's commit
            await session.commit()
        job = await finished(rail, "acme", result.job.id)

    assert await counts(host_sessions) == (1, 1, 1)
    assert job.status.value == "succeeded"
    assert len(published.job_ids) == 1


async def test_a_host_rollback_leaves_no_job_and_publishes_nothing(
    tmp_path: Path,
    host_sessions: async_sessionmaker[AsyncSession],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rail = JobRail(await rail_settings(tmp_path))
    render = declare_jobs(rail)

    async with rail.lifespan():
        published = Published(rail, monkeypatch)
        async with host_sessions() as session:
            await session.execute(text("INSERT INTO orders VALUES ('o-1')"))
            await render.enqueue(RenderReport(report_id="r-1"), tenant_id="acme", session=session)
            await session.rollback()
        async with host_sessions() as session:  # closed without a commit
            await render.enqueue(RenderReport(report_id="r-2"), tenant_id="acme", session=session)
        async with host_sessions() as session:  # a savepoint rolled back, the rest commits
            await session.execute(text("INSERT INTO orders VALUES ('o-3')"))
            kept = await render.enqueue(
                RenderReport(report_id="r-3"), tenant_id="acme", session=session
            )
            savepoint = await session.begin_nested()
            await render.enqueue(RenderReport(report_id="r-4"), tenant_id="acme", session=session)
            await savepoint.rollback()
            await session.commit()
        await finished(rail, "acme", kept.job.id)

    assert await counts(host_sessions) == (1, 1, 1)
    assert len(published.job_ids) == 1


class Greeter:
    """A host's own service, provided by the host's dishka provider."""

    def greet(self, name: str) -> str:
        return f"hello, {name}"


class Name(BaseModel):
    name: str


async def test_the_hosts_providers_serve_its_job_handlers(tmp_path: Path) -> None:
    from dishka import FromDishka, Provider, Scope, provide

    from jobrail import JobContext

    class HostProvider(Provider):
        greeter = provide(Greeter, scope=Scope.APP)

    rail = JobRail(await rail_settings(tmp_path), providers=[HostProvider()])

    @rail.job("host.greet", payload=Name)
    async def greet(payload: Name, ctx: JobContext, greeter: FromDishka[Greeter]) -> dict[str, Any]:
        return {"said": greeter.greet(payload.name)}

    async with rail.lifespan():
        result = await greet.enqueue(Name(name="ada"), tenant_id="acme")
        job = await finished(rail, "acme", result.job.id)

    assert (job.status.value, job.result) == ("succeeded", {"said": "hello, ada"})
