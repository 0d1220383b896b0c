"""EnqueueJob inside a context's unit of work: the job commits with the caller's
transaction or not at all, and its message leaves only after that commit."""

from pathlib import Path

import pytest
from sqlalchemy import func, select

from jobrail.jobs.enqueue import EnqueueJobCommand
from jobrail.jobs.workflows import BatchCommand, FlowJob
from jobrail.kernel.errors import NotFoundError
from jobrail.kernel.ids import TenantId
from jobrail.outbox.uow import SqlaUnitOfWork
from jobrail.store.tables import flows, jobs
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


async def test_a_batch_started_in_a_transaction_commits_with_it_or_not_at_all(
    tmp_path: Path,
) -> None:
    dispatcher = FakeDispatcher()
    engine, factory = await sqlite_units(tmp_path, dispatcher)
    command = BatchCommand(
        tenant_id=TenantId("acme"),
        jobs=[FlowJob("demo.echo", {"message": str(n)}) for n in range(3)],
        then=FlowJob("demo.echo", {"message": "done"}),
    )

    async with factory(SqlaUnitOfWork) as uow:
        await uow.workflows.batch(command)  # rolled back: no flow, no job, no message
    async with engine.connect() as conn:
        assert await conn.scalar(select(func.count()).select_from(flows)) == 0
        assert await conn.scalar(select(func.count()).select_from(jobs)) == 0
    assert dispatcher.dispatched == []

    async with factory(SqlaUnitOfWork) as uow:
        started = await uow.workflows.batch(command)
        assert dispatcher.dispatched == []  # nothing before the commit
        await uow.commit()

    async with engine.connect() as conn:
        statuses = {
            (role, status)
            for role, status in (await conn.execute(select(jobs.c.flow_role, jobs.c.status)))
        }
        stored = await conn.scalar(select(func.count()).select_from(jobs))
    await engine.dispose()
    assert stored == 4
    assert statuses == {("member", "pending"), ("then", "blocked")}
    assert started.flow.total == 3
    # The members' messages leave after the commit; the callback's waits for its release.
    assert len(dispatcher.dispatched) == 3


async def test_jobs_added_to_a_running_batch_commit_with_the_caller_or_not_at_all(
    tmp_path: Path,
) -> None:
    dispatcher = FakeDispatcher()
    engine, factory = await sqlite_units(tmp_path, dispatcher)
    acme = TenantId("acme")
    async with factory(SqlaUnitOfWork) as uow:
        started = await uow.workflows.batch(
            BatchCommand(tenant_id=acme, jobs=[FlowJob("demo.echo", {"message": "0"})])
        )
        await uow.commit()
    more = [FlowJob("demo.echo", {"message": str(n)}) for n in (1, 2)]

    async with factory(SqlaUnitOfWork) as uow:
        await uow.workflows.add_to_batch(acme, started.flow.id, more)  # rolled back
    async with factory(SqlaUnitOfWork) as uow:
        added = await uow.workflows.add_to_batch(acme, started.flow.id, more)
        await uow.commit()
    async with factory(SqlaUnitOfWork) as uow:
        with pytest.raises(NotFoundError):  # another tenant's batch is none of its own
            await uow.workflows.add_to_batch(TenantId("globex"), started.flow.id, more)

    async with engine.connect() as conn:
        total = await conn.scalar(select(flows.c.total))
        steps = sorted(
            (await conn.execute(select(jobs.c.flow_step).where(jobs.c.id.in_(added)))).scalars()
        )
        stored = await conn.scalar(select(func.count()).select_from(jobs))
    await engine.dispose()
    assert total == 3
    assert stored == 3
    assert steps == [1, 2]
    assert len(dispatcher.dispatched) == 3  # one message per member, after each commit
