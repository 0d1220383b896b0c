"""Retention on SQLite and Postgres: prune-messages deletes outbox rows published long
ago and inbox rows last taken long ago, and keeps recent ones, unpublished ones
however old, and an inbox row whose message came again; prune-jobs still prunes jobs."""

import uuid
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import insert, select
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession

from contexts.notifications.adapters.persistence import SqlaNotificationsUnitOfWork
from contexts.notifications.application.use_cases import SendReceipt, SendReceiptCommand
from jobrail.events.catalog import EventCatalog
from jobrail.jobs.domain import JobStatus
from jobrail.jobs.registry import JobRegistry
from jobrail.kernel.ids import TenantId
from jobrail.maintenance.persistence import (
    SqlaFinishedFlows,
    SqlaFinishedJobs,
    SqlaProcessedInbox,
    SqlaPublishedOutbox,
)
from jobrail.maintenance.use_cases import PruneFinishedJobs, PruneMessages
from jobrail.outbox.inbox import SqlaInbox
from jobrail.outbox.uow import UnitOfWorkFactory
from jobrail.store.engine import create_sessionmaker
from jobrail.store.tables import flows, inbox, jobs, outbox
from tests.contexts.fakes import FakeEmailSender
from tests.fakes import START, FakeDispatcher, FixedClock
from tests.support.services import store_engine

DAY = timedelta(days=1)


@pytest.fixture(params=["sqlite", "postgres"])
async def engine(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[AsyncEngine]:
    engine: AsyncEngine = await store_engine(request, tmp_path, "jobs, outbox, inbox, flows")
    yield engine
    await engine.dispose()


async def _outbox_row(engine: AsyncEngine, created_days_ago: float, published: bool) -> str:
    row_id = uuid.uuid4()
    created = START - created_days_ago * DAY
    async with engine.begin() as conn:
        await conn.execute(
            insert(outbox).values(
                id=row_id,
                queue="jobs.default",
                body=b"{}",
                headers={},
                created_at=created,
                published_at=created + timedelta(seconds=1) if published else None,
            )
        )
    return str(row_id)


async def _take(engine: AsyncEngine, clock: FixedClock, message_id: str) -> bool:
    async with AsyncSession(engine) as session, session.begin():
        return await SqlaInbox(session, clock).accept("notifications.receipt", message_id)


async def test_prune_messages_keeps_what_is_recent_unpublished_or_taken_again(
    engine: AsyncEngine,
) -> None:
    old_published = await _outbox_row(engine, created_days_ago=8, published=True)
    new_published = await _outbox_row(engine, created_days_ago=6, published=True)
    old_unpublished = await _outbox_row(engine, created_days_ago=30, published=False)
    clock = FixedClock(START - 50 * DAY)
    first_seen = [await _take(engine, clock, m) for m in ("old", "seen-again", "also-seen")]
    clock.advance(20 * DAY)
    again = await _take(engine, clock, "seen-again")  # a redriven job took it again
    clock.current = START - 10 * DAY
    await _take(engine, clock, "recent")
    prune = PruneMessages(
        SqlaPublishedOutbox(engine),
        SqlaProcessedInbox(engine),
        FixedClock(START),
        keep_outbox=7 * DAY,
        keep_inbox=45 * DAY,
        batch=1,  # one row per batch: the batching loop runs to the end
    )

    pruned = await prune()
    async with engine.connect() as conn:
        outbox_left = set((await conn.execute(select(outbox.c.id))).scalars())
        inbox_left = set((await conn.execute(select(inbox.c.message_id))).scalars())

    assert first_seen == [True, True, True]
    assert again is False  # still a duplicate, and its row's time renewed
    assert (pruned.outbox_deleted, pruned.inbox_deleted) == (1, 2)
    assert {str(i) for i in outbox_left} == {new_published, old_unpublished}
    assert old_published not in {str(i) for i in outbox_left}
    assert inbox_left == {"seen-again", "recent"}


async def test_prune_jobs_still_deletes_only_finished_jobs_past_their_time(
    engine: AsyncEngine,
) -> None:
    def job_row(status: JobStatus, days_ago: float) -> dict[str, object]:
        at = START - days_ago * DAY
        finished = at if status in (JobStatus.SUCCEEDED, JobStatus.FAILED) else None
        return {
            "id": uuid.uuid4(),
            "tenant_id": "acme",
            "type": "demo.echo",
            "queue": "jobs.default",
            "status": status.value,
            "payload": {},
            "attempts": 0,
            "max_attempts": 3,
            "trace_context": {},
            "created_at": at,
            "updated_at": at,
            "finished_at": finished,
        }

    rows = [
        job_row(JobStatus.SUCCEEDED, 40),
        job_row(JobStatus.FAILED, 31),
        job_row(JobStatus.SUCCEEDED, 2),
        job_row(JobStatus.PENDING, 90),
    ]
    async with engine.begin() as conn:
        await conn.execute(insert(jobs), rows)

    pruned = await PruneFinishedJobs(SqlaFinishedJobs(engine), FixedClock(START), 30 * DAY)()
    async with engine.connect() as conn:
        left = set((await conn.execute(select(jobs.c.id))).scalars())

    assert pruned.deleted == 2
    assert left == {rows[2]["id"], rows[3]["id"]}


async def test_prune_jobs_deletes_finished_flows_once_none_of_their_jobs_is_left(
    engine: AsyncEngine,
) -> None:
    def flow_row(finished_days_ago: float | None, created_days_ago: float = 60) -> dict:
        created = START - created_days_ago * DAY
        finished = None if finished_days_ago is None else START - finished_days_ago * DAY
        return {
            "id": uuid.uuid4(),
            "tenant_id": "acme",
            "kind": "batch",
            "status": "running" if finished is None else "succeeded",
            "total": 1,
            "succeeded": 0 if finished is None else 1,
            "callbacks": {},
            "created_at": created,
            "updated_at": finished or created,
            "finished_at": finished,
        }

    gone, still_has_a_job, recent, running = (
        flow_row(40),
        flow_row(40),
        flow_row(2),
        flow_row(None),
    )
    # A job of the flow that is still there (a callback that finished later, say).
    member = {
        "id": uuid.uuid4(),
        "tenant_id": "acme",
        "type": "demo.echo",
        "queue": "jobs.default",
        "status": JobStatus.SUCCEEDED.value,
        "payload": {},
        "attempts": 1,
        "max_attempts": 3,
        "trace_context": {},
        "created_at": START - 3 * DAY,
        "updated_at": START - 3 * DAY,
        "finished_at": START - 3 * DAY,
        "flow_id": still_has_a_job["id"],
    }
    async with engine.begin() as conn:
        await conn.execute(insert(flows), [gone, still_has_a_job, recent, running])
        await conn.execute(insert(jobs), [member])

    prune = PruneFinishedJobs(
        SqlaFinishedJobs(engine), FixedClock(START), 30 * DAY, flows=SqlaFinishedFlows(engine)
    )
    pruned = await prune()
    async with engine.connect() as conn:
        left = set((await conn.execute(select(flows.c.id))).scalars())

    assert pruned.flows_deleted == 1
    assert left == {still_has_a_job["id"], recent["id"], running["id"]}


async def test_a_receipt_event_taken_again_renews_its_inbox_row(engine: AsyncEngine) -> None:
    # Through the real use case and unit of work: a duplicate is answered without a
    # change to the notification, and its inbox renewal must still be committed, or
    # prune-messages would drop the row of an event a redrive still brings back.
    clock = FixedClock(START - 50 * DAY)
    factory = UnitOfWorkFactory(
        create_sessionmaker(engine),
        FakeDispatcher(),
        clock,
        EventCatalog([]),
        JobRegistry([], queues=["jobs.default"], default_timeout_s=30),
        3,
    )
    send = SendReceipt(factory(SqlaNotificationsUnitOfWork), FakeEmailSender(), clock)
    command = SendReceiptCommand(
        TenantId("acme"), f"evt-{uuid.uuid4()}", "inv-1", "ada@example.com", 1999, "EUR"
    )

    await send(command)
    clock.advance(20 * DAY)
    await send(command)  # the event again: a redriven job, a redelivery

    async with engine.connect() as conn:
        taken = (
            await conn.execute(
                select(inbox.c.processed_at).where(inbox.c.message_id == command.event_id)
            )
        ).scalar_one()
    assert taken == clock.now()
