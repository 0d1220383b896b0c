"""Jobs created inside a unit of work (a context's own jobs, event deliveries, the
members, callbacks and steps of batches and chains) are counted once they commit, and
only the ones the transaction created."""

from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from sqlalchemy import select

from jobrail.demo.jobs import batch_sum, echo
from jobrail.events.catalog import EventCatalog, EventDelivery, EventSpec
from jobrail.jobs.enqueue import EnqueueJobCommand
from jobrail.jobs.registry import job
from jobrail.jobs.workflows import BatchCommand, ChainCommand, FlowJob, FlowStarted
from jobrail.kernel.events import IntegrationEvent
from jobrail.kernel.ids import TenantId
from jobrail.outbox.uow import SqlaUnitOfWork
from jobrail.store.tables import jobs
from jobrail.worker.context import JobContext
from tests.fakes import START, FakeDispatcher
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


@dataclass(frozen=True, kw_only=True)
class Pinged(IntegrationEvent):
    name: ClassVar[str] = "test.pinged.v1"


@job("test.on_pinged", payload=EventDelivery, timeout_s=30)
async def on_pinged(payload: EventDelivery, ctx: JobContext) -> None:
    return None


async def test_every_job_a_transaction_creates_is_counted_once_whatever_made_it(
    tmp_path: Path,
) -> None:
    counted = Counted()
    engine, factory = await sqlite_units(
        tmp_path,
        FakeDispatcher(),
        job_types=[echo, batch_sum, on_pinged],
        events=EventCatalog([EventSpec(Pinged, producer="tests", consumers=["test.on_pinged"])]),
        enqueued=counted,
    )
    acme = TenantId("acme")
    batch = BatchCommand(
        tenant_id=acme,
        jobs=[FlowJob("demo.echo", {"message": str(n)}) for n in range(3)],
        then=FlowJob("demo.batch_sum", {}),
        finally_=FlowJob("demo.batch_sum", {}),
        idempotency_key="batch",
    )
    # A chain's later steps wait (blocked) for the one before, but exist from its start.
    chain = ChainCommand(
        tenant_id=acme,
        steps=[FlowJob("demo.echo", {"message": step}) for step in ("a", "b")],
        idempotency_key="chain",
    )
    event = Pinged(tenant_id=acme, occurred_at=START)
    single = EnqueueJobCommand(
        tenant_id=acme, type="demo.echo", payload={"message": "m"}, idempotency_key="single"
    )

    async def start_everything() -> FlowStarted:
        async with factory(SqlaUnitOfWork) as uow:
            started = await uow.workflows.batch(batch)
            await uow.workflows.chain(chain)
            await uow.events.publish(event)
            await uow.queue.enqueue(single)
            await uow.commit()
        return started

    started = await start_everything()
    await start_everything()  # the same requests again: replays, nothing new
    async with factory(SqlaUnitOfWork) as uow:  # rolled back: nothing made
        await uow.workflows.chain(ChainCommand(tenant_id=acme, steps=chain.steps))
    async with factory(SqlaUnitOfWork) as uow:  # as a job of the batch may
        late = [FlowJob("demo.echo", {"message": "late"})]
        await uow.workflows.add_to_batch(acme, started.flow.id, late)
        await uow.commit()
    counted_types = Counter(counted.types)
    async with engine.connect() as conn:
        stored = Counter((await conn.execute(select(jobs.c.type))).scalars())
    await engine.dispose()

    assert counted_types == {"demo.echo": 3 + 2 + 1 + 1, "demo.batch_sum": 2, "test.on_pinged": 1}
    assert counted_types == stored
