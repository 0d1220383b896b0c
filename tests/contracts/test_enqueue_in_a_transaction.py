"""EnqueueJob inside a context's unit of work: the job commits with the caller's
transaction or not at all, and its message leaves only after that commit."""

import asyncio
from pathlib import Path

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import create_async_engine

from jobrail.cli import migrate
from jobrail.demo.jobs import echo
from jobrail.jobs.events import EventCatalog
from jobrail.jobs.registry import JobRegistry
from jobrail.jobs.use_cases import EnqueueJobCommand
from jobrail.kernel.ids import TenantId
from jobrail.persistence.engine import create_sessionmaker
from jobrail.persistence.tables import jobs
from jobrail.persistence.uow import SqlaUnitOfWork, UnitOfWorkFactory
from jobrail.settings import Settings
from tests.fakes import FakeDispatcher, FixedClock


async def test_a_job_enqueued_in_a_transaction_commits_with_it_or_not_at_all(
    tmp_path: Path,
) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path}/uow.db"
    await asyncio.to_thread(migrate, Settings(database={"url": url}))  # type: ignore[arg-type]
    engine = create_async_engine(url)
    registry = JobRegistry([echo], queues=["jobs.default"], default_timeout_s=30)
    dispatcher = FakeDispatcher()
    factory = UnitOfWorkFactory(
        create_sessionmaker(engine), dispatcher, FixedClock(), EventCatalog([]), registry, 3
    )
    command = EnqueueJobCommand(
        tenant_id=TenantId("acme"), type="demo.echo", payload={"message": "m"}
    )

    async with factory(SqlaUnitOfWork) as uow:
        await uow.queue.enqueue(command)  # rolled back
    assert dispatcher.dispatched == []

    async with factory(SqlaUnitOfWork) as uow:
        result = await uow.queue.enqueue(command)
        assert dispatcher.dispatched == []  # nothing before the commit
        await uow.commit()

    async with engine.connect() as conn:
        stored = await conn.scalar(select(func.count()).select_from(jobs))
    await engine.dispose()
    assert stored == 1
    assert result.created
    assert len(dispatcher.dispatched) == 1
