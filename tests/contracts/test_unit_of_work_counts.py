"""Jobs enqueued inside a unit of work (event deliveries, a context's own jobs) are
counted once they commit, and only the ones the transaction created."""

from pathlib import Path

from jobrail.jobs.use_cases import EnqueueJobCommand
from jobrail.kernel.ids import TenantId
from jobrail.persistence.uow import SqlaUnitOfWork
from tests.fakes import FakeDispatcher
from tests.support.units import sqlite_units


class Counted:
    def __init__(self) -> None:
        self.types: list[str] = []

    def enqueued(self, job_type: str) -> None:
        self.types.append(job_type)


async def test_only_committed_new_jobs_are_counted(tmp_path: Path) -> None:
    counted = Counted()
    engine, factory = await sqlite_units(tmp_path, FakeDispatcher(), enqueued=counted)

    def command(key: str) -> EnqueueJobCommand:
        return EnqueueJobCommand(
            tenant_id=TenantId("acme"),
            type="demo.echo",
            payload={"message": "m"},
            idempotency_key=key,
        )

    async with factory(SqlaUnitOfWork) as uow:
        await uow.queue.enqueue(command("a"))
        await uow.queue.enqueue(command("a"))  # the same key: the same job
        await uow.queue.enqueue(command("b"))
        assert counted.types == []  # nothing before the commit
        await uow.commit()
    async with factory(SqlaUnitOfWork) as uow:
        await uow.queue.enqueue(command("c"))  # rolled back: never counted
    async with factory(SqlaUnitOfWork) as uow:
        await uow.queue.enqueue(command("a"))  # a replay of a committed job
        await uow.commit()
    await engine.dispose()

    assert counted.types == ["demo.echo", "demo.echo"]
