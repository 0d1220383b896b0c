"""JobRail in the stack mode: a job enqueued in the host's own session on Postgres is
invisible and unpublished until the host commits, and is neither after a rollback."""

from collections.abc import AsyncIterator

import pytest
from sqlalchemy import func, select, text
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from jobrail import JobRail
from jobrail.settings import Settings
from jobrail.store.tables import jobs, outbox
from tests.support.host_app import RenderReport, declare_jobs
from tests.support.rabbit import RabbitProbe
from tests.support.services import wait_for

pytestmark = pytest.mark.integration


@pytest.fixture
async def host_sessions(engine: AsyncEngine) -> AsyncIterator[async_sessionmaker[AsyncSession]]:
    """The host's own sessions, on jobrail's database, with a table of its own."""
    async with engine.begin() as conn:
        await conn.execute(text("CREATE TABLE IF NOT EXISTS host_orders (id text PRIMARY KEY)"))
        await conn.execute(text("TRUNCATE host_orders"))
    yield async_sessionmaker(engine, expire_on_commit=False)
    async with engine.begin() as conn:
        await conn.execute(text("DROP TABLE host_orders"))


async def rows(engine: AsyncEngine) -> tuple[int, int, int]:
    async with engine.connect() as conn:
        orders = (await conn.execute(text("SELECT count(*) FROM host_orders"))).scalar_one()
        job_rows = (await conn.execute(select(func.count()).select_from(jobs))).scalar_one()
        outbox_rows = (await conn.execute(select(func.count()).select_from(outbox))).scalar_one()
    return orders, job_rows, outbox_rows


async def test_the_job_commits_and_is_published_with_the_host_transaction(
    stack_settings: Settings,
    rabbit: RabbitProbe,
    engine: AsyncEngine,
    host_sessions: async_sessionmaker[AsyncSession],
) -> None:
    rail = JobRail(stack_settings.model_copy(update={"modules": []}))
    render = declare_jobs(rail)
    queue = rabbit.topology.queues["jobs.default"]

    async with rail.lifespan():
        async with host_sessions() as session:
            await session.execute(text("INSERT INTO host_orders VALUES ('o-1')"))
            result = await render.enqueue(
                RenderReport(report_id="r-1"), tenant_id="acme", session=session
            )
            before = await rows(engine), await rabbit.depth(queue)
            await session.commit()

        async def published() -> bool:
            ready, _ = await rabbit.depth(queue)
            return ready == 1

        await wait_for(published, timeout=10, what="the job's message in its queue")
        async with engine.connect() as conn:
            stored = (
                await conn.execute(select(jobs.c.status).where(jobs.c.id == result.job.id))
            ).scalar_one()

    assert before == ((0, 0, 0), (0, 0))
    assert await rows(engine) == (1, 1, 1)
    assert stored == "pending"


async def test_a_host_rollback_leaves_nothing_and_publishes_nothing(
    stack_settings: Settings,
    rabbit: RabbitProbe,
    engine: AsyncEngine,
    host_sessions: async_sessionmaker[AsyncSession],
) -> None:
    rail = JobRail(stack_settings.model_copy(update={"modules": []}))
    render = declare_jobs(rail)
    queue = rabbit.topology.queues["jobs.default"]

    async with rail.lifespan():
        async with host_sessions() as session:
            await session.execute(text("INSERT INTO host_orders VALUES ('o-1')"))
            await render.enqueue(RenderReport(report_id="r-1"), tenant_id="acme", session=session)
            await session.rollback()
        # What is already published is in the queue by now (a broker confirm per publish).
        depth = await rabbit.depth(queue)

    assert await rows(engine) == (0, 0, 0)
    assert depth == (0, 0)
