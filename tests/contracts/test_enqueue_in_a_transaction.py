"""EnqueueJob inside a context's unit of work: the job commits with the caller's
transaction or not at all, and its message leaves only after that commit."""

from pathlib import Path

from sqlalchemy import func, select

from jobrail.jobs.use_cases import EnqueueJobCommand
from jobrail.kernel.ids import TenantId
from jobrail.persistence.tables import jobs
from jobrail.persistence.uow import SqlaUnitOfWork
from tests.fakes import FakeDispatcher
from tests.support.units import sqlite_units


async def test_a_job_enqueued_in_a_transaction_commits_with_it_or_not_at_all(
    tmp_path: Path,
) -> None:
    dispatcher = FakeDispatcher()
    engine, factory = await sqlite_units(tmp_path, dispatcher)
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
