"""The outbox relay on Postgres: whatever the fast path missed is published exactly once
per relay pass, even with several relays running at once."""

import asyncio
from collections import Counter
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from jobrail.jobs.messages import JobMessage
from jobrail.jobs.ports import ClaimToken
from jobrail.kernel.errors import BrokerUnavailableError
from jobrail.outbox.relay import OutboxPublisher, OutboxRelay, SqlaOutboxMarks
from jobrail.store.outbox_rows import insert_outbox_rows
from jobrail.store.tables import outbox
from jobrail.transport.codec import Envelope, encode, publish_side_by_side
from tests.fakes import NO_TYPES, START, FixedClock, make_job


class SlowCountingPublisher:
    def __init__(self) -> None:
        self.published: Counter[str] = Counter()
        self.down = False

    async def publish(self, envelope: Envelope) -> None:
        if self.down:
            raise BrokerUnavailableError("down")
        await asyncio.sleep(0.001)
        self.published[str(envelope.id)] += 1

    async def publish_many(
        self, envelopes: Sequence[Envelope], timeout_s: float | None = None
    ) -> list[BaseException | None]:
        return await publish_side_by_side(self.publish, envelopes, timeout_s)


class CountingMarks(SqlaOutboxMarks):
    """Marks on Postgres, counting the statements that marked."""

    statements = 0

    async def mark_published(self, ids: Sequence[Any], at: Any) -> None:
        self.statements += 1
        await super().mark_published(ids, at)


async def _unpublished(engine: AsyncEngine) -> int:
    async with engine.connect() as conn:
        count = await conn.scalar(
            select(func.count()).select_from(outbox).where(outbox.c.published_at.is_(None))
        )
    return int(count or 0)


async def test_concurrent_relays_publish_every_row_once(engine: AsyncEngine) -> None:
    envelopes = [Envelope(queue="jobs.default", body=b"{}") for _ in range(600)]
    async with engine.begin() as conn:
        await insert_outbox_rows(conn, envelopes, START)
    publisher = SlowCountingPublisher()
    clock = FixedClock(START + timedelta(minutes=1))
    relays = [
        OutboxRelay(
            engine,
            publisher,
            clock,
            NO_TYPES,
            batch=50,
            min_age=timedelta(seconds=2),
            interval=timedelta(seconds=1),
        )
        for _ in range(4)
    ]

    async def drain(relay: OutboxRelay) -> int:
        total = 0
        while (published := await relay.relay_once()) > 0:
            total += published
        return total

    totals = await asyncio.gather(*(drain(relay) for relay in relays))

    assert sum(totals) == 600
    assert len(publisher.published) == 600
    assert set(publisher.published.values()) == {1}
    assert sum(1 for t in totals if t > 0) > 1, "the relays should have shared the work"
    assert await _unpublished(engine) == 0


async def test_the_relay_leaves_young_rows_to_the_fast_path(engine: AsyncEngine) -> None:
    async with engine.begin() as conn:
        await insert_outbox_rows(conn, [Envelope(queue="jobs.default", body=b"{}")], START)
    publisher = SlowCountingPublisher()
    relay = _relay(engine, publisher, START + timedelta(seconds=1))

    assert await relay.relay_once() == 0
    assert await _unpublished(engine) == 1


async def test_a_relay_pass_with_the_broker_down_keeps_the_rows_and_counts_the_attempt(
    engine: AsyncEngine,
) -> None:
    async with engine.begin() as conn:
        await insert_outbox_rows(conn, [Envelope(queue="jobs.default", body=b"{}")], START)
    publisher = SlowCountingPublisher()
    publisher.down = True
    relay = _relay(engine, publisher, START + timedelta(minutes=1))

    assert await relay.relay_once() == 0
    publisher.down = False
    assert await relay.relay_once() == 1

    async with engine.connect() as conn:
        attempts = await conn.scalar(select(outbox.c.attempts))
    assert attempts == 1
    assert await _unpublished(engine) == 0


async def test_the_fast_path_marks_what_it_published_and_stops_at_the_first_failure(
    engine: AsyncEngine,
) -> None:
    envelopes = [Envelope(queue="jobs.default", body=b"{}") for _ in range(3)]
    async with engine.begin() as conn:
        await insert_outbox_rows(conn, envelopes, START)

    class FailsSecond(SlowCountingPublisher):
        async def publish(self, envelope: Envelope) -> None:
            if envelope.id == envelopes[1].id:
                raise BrokerUnavailableError("down")
            await super().publish(envelope)

    publisher = FailsSecond()
    marks = SqlaOutboxMarks(engine)
    await OutboxPublisher(marks, publisher, FixedClock(), timedelta(seconds=1)).dispatch_envelopes(
        envelopes
    )

    assert list(publisher.published) == [str(envelopes[0].id)]
    assert await _unpublished(engine) == 2


async def test_fast_path_dispatches_made_together_mark_in_one_statement_and_fail_alone(
    engine: AsyncEngine,
) -> None:
    batches = [[Envelope(queue="jobs.default", body=b"{}") for _ in range(2)] for _ in range(4)]
    async with engine.begin() as conn:
        await insert_outbox_rows(conn, [e for batch in batches for e in batch], START)
    refused = batches[1][0].id

    class RefusesOne(SlowCountingPublisher):
        async def publish(self, envelope: Envelope) -> None:
            if envelope.id == refused:
                raise BrokerUnavailableError("down")
            await super().publish(envelope)

    publisher, marks = RefusesOne(), CountingMarks(engine)
    fast_path = OutboxPublisher(marks, publisher, FixedClock(), timedelta(seconds=1))

    await asyncio.gather(*(fast_path.dispatch_envelopes(batch) for batch in batches))

    # The second dispatch stopped at its first message; the others published all theirs.
    assert len(publisher.published) == 6
    assert str(batches[1][1].id) not in publisher.published
    assert marks.statements == 1
    assert await _unpublished(engine) == 2


async def test_a_publish_that_hangs_leaves_its_row_to_the_relay_and_the_rest_marked(
    engine: AsyncEngine,
) -> None:
    envelopes = [Envelope(queue="jobs.default", body=b"{}") for _ in range(3)]
    async with engine.begin() as conn:
        await insert_outbox_rows(conn, envelopes, START)

    class HangsOnFirst(SlowCountingPublisher):
        async def publish(self, envelope: Envelope) -> None:
            if envelope.id == envelopes[0].id:
                await asyncio.Event().wait()  # no confirm, ever
            await super().publish(envelope)

    publisher = HangsOnFirst()
    fast_path = OutboxPublisher(
        SqlaOutboxMarks(engine), publisher, FixedClock(), timedelta(seconds=0.2)
    )

    await asyncio.gather(*(fast_path.dispatch_envelopes([e]) for e in envelopes))

    assert set(publisher.published) == {str(envelopes[1].id), str(envelopes[2].id)}
    assert await _unpublished(engine) == 1


async def test_the_sweep_publishes_again_a_job_whose_worker_and_message_are_gone(
    engine: AsyncEngine,
) -> None:
    from sqlalchemy.ext.asyncio import AsyncSession

    from jobrail.store.jobs import SqlaJobRepository, SqlaJobStore
    from jobrail.store.tables import jobs
    from tests.fakes import make_job

    lost, healthy = make_job(), make_job()
    async with AsyncSession(engine) as session:
        for job in (lost, healthy):
            await SqlaJobRepository(session).add(job)
        await session.commit()
    store = SqlaJobStore(engine)
    await store.claim(lost.id, START, timedelta(seconds=30))
    await store.claim(healthy.id, START + timedelta(minutes=10), timedelta(seconds=30))
    publisher = SlowCountingPublisher()
    now = START + timedelta(minutes=10)
    relay = _relay(engine, publisher, now)

    assert await relay.sweep_leases() == 1
    assert await relay.sweep_leases() == 0  # its lease now ends "now": not stale yet

    async with engine.connect() as conn:
        lease = await conn.scalar(select(jobs.c.lease_until).where(jobs.c.id == lost.id))
    assert lease == now
    claimed = await store.claim(lost.id, now, timedelta(seconds=30))
    assert claimed.job is not None
    assert claimed.job.attempts == 2
    assert len(publisher.published) == 1


async def test_fast_path_dispatch_each_publishes_commits_side_by_side_each_in_order(
    engine: AsyncEngine,
) -> None:
    """What ``DetachedDispatch`` hands over for one loop turn: several commits' messages.
    They publish side by side (each publish here waits until the first message of every
    commit is under way, so one at a time would stall until the fast path's deadline),
    each commit's in order, and are marked in one statement."""
    commits = [[JobMessage.of(make_job()) for _ in range(2)] for _ in range(4)]
    async with engine.begin() as conn:
        await insert_outbox_rows(conn, [encode(m) for c in commits for m in c], START)
    all_under_way = asyncio.Event()

    class Together(SlowCountingPublisher):
        def __init__(self) -> None:
            super().__init__()
            self.order: list[str] = []

        async def publish(self, envelope: Envelope) -> None:
            self.order.append(str(envelope.id))
            if len(self.order) >= len(commits):
                all_under_way.set()
            await all_under_way.wait()
            await super().publish(envelope)

    publisher, marks = Together(), CountingMarks(engine)
    fast_path = OutboxPublisher(marks, publisher, FixedClock(), timedelta(seconds=1))

    await fast_path.dispatch_each(commits)

    assert sum(publisher.published.values()) == 8
    ids = [[str(encode(m).id) for m in c] for c in commits]
    assert sorted(publisher.order[:4]) == sorted(first for first, _ in ids)  # side by side
    for first, second in ids:
        assert publisher.order.index(first) < publisher.order.index(second)  # in order
    assert marks.statements == 1
    assert await _unpublished(engine) == 0


async def test_a_round_that_fails_as_a_whole_keeps_the_marks_of_the_rounds_before_it(
    engine: AsyncEngine,
) -> None:
    """The fast path publishes the k-th message of every dispatch in round k; a publisher
    that fails a whole round leaves that round and the rest to the relay, and what the
    earlier rounds published is still marked."""
    batches = [[Envelope(queue="jobs.default", body=b"{}") for _ in range(2)] for _ in range(3)]
    async with engine.begin() as conn:
        await insert_outbox_rows(conn, [e for batch in batches for e in batch], START)

    class FailsSecondRound(SlowCountingPublisher):
        rounds = 0

        async def publish_many(
            self, envelopes: Sequence[Envelope], timeout_s: float | None = None
        ) -> list[BaseException | None]:
            self.rounds += 1
            if self.rounds == 2:
                raise RuntimeError("the publisher broke")
            return await super().publish_many(envelopes, timeout_s)

    publisher, marks = FailsSecondRound(), CountingMarks(engine)
    fast_path = OutboxPublisher(marks, publisher, FixedClock(), timedelta(seconds=1))

    # Made together: one batch of three dispatches (as the other tests here).
    await asyncio.gather(*(fast_path.dispatch_envelopes(batch) for batch in batches))

    assert set(publisher.published) == {str(batch[0].id) for batch in batches}
    assert marks.statements == 1
    assert await _unpublished(engine) == 3


async def test_the_sweep_leaves_a_paused_job_to_its_resume(engine: AsyncEngine) -> None:
    # Its worker died while its tenant was paused: no attempt may start before the
    # resume, and its own message already comes round (the claim refuses it meanwhile).
    from sqlalchemy.ext.asyncio import AsyncSession

    from jobrail.store.jobs import SqlaJobRepository, SqlaJobStore
    from jobrail.store.pauses import SqlaPauses
    from jobrail.store.tables import dispatch_pauses
    from tests.fakes import make_job

    lost = make_job(tenant_id="paused-tenant")
    async with AsyncSession(engine) as session:
        await SqlaJobRepository(session).add(lost)
        await session.commit()
    await SqlaJobStore(engine).claim(lost.id, START, timedelta(seconds=30))
    pauses = SqlaPauses(engine)
    await pauses.pause("tenant", "paused-tenant", START)
    now = START + timedelta(minutes=10)
    publisher = SlowCountingPublisher()
    relay = _relay(engine, publisher, now)

    try:
        assert await relay.sweep_leases() == 0
        await pauses.resume("tenant", "paused-tenant")
        assert await relay.sweep_leases() == 1
    finally:
        async with engine.begin() as conn:
            await conn.execute(dispatch_pauses.delete())


async def test_the_deadline_sweep_expires_the_waiting_jobs_past_their_deadline_alone(
    engine: AsyncEngine,
) -> None:
    from sqlalchemy.ext.asyncio import AsyncSession

    from jobrail.jobs.domain import JobStatus
    from jobrail.store.jobs import SqlaJobRepository, SqlaJobStore
    from jobrail.store.tables import job_events, jobs

    now = START + timedelta(minutes=10)
    past, retrying, ahead, running, plain = (
        make_job(deadline=now - timedelta(seconds=1)),
        make_job(deadline=now),
        make_job(deadline=now + timedelta(seconds=1)),
        make_job(deadline=now - timedelta(seconds=1)),
        make_job(),
    )
    async with AsyncSession(engine) as session:
        for job in (past, retrying, ahead, running, plain):
            await SqlaJobRepository(session).add(job)
        await session.commit()
    store = SqlaJobStore(engine)
    claimed = (await store.claim(retrying.id, START, timedelta(seconds=30))).job
    assert claimed is not None
    claimed.retry_later("boom", START + timedelta(minutes=20), START)
    assert await store.record(claimed, ClaimToken.of(claimed), [])
    await store.claim(running.id, START, timedelta(hours=1))  # runs on a live lease
    relay = OutboxRelay(
        engine,
        SlowCountingPublisher(),
        FixedClock(now),
        NO_TYPES,
        batch=1,  # one at a time: one pass goes on until none is left
        min_age=timedelta(seconds=2),
        interval=timedelta(seconds=1),
    )

    swept = [await relay.expire_overdue() for _ in range(3)]

    assert swept == [2, 0, 0]
    async with engine.connect() as conn:
        statuses = dict((await conn.execute(select(jobs.c.id, jobs.c.status))).all())
        events = (
            await conn.execute(select(job_events.c.job_id).where(job_events.c.name == "expired"))
        ).all()
    assert statuses[past.id] == statuses[retrying.id] == JobStatus.EXPIRED.value
    assert statuses[ahead.id] == JobStatus.PENDING.value
    assert statuses[running.id] == JobStatus.RUNNING.value
    assert statuses[plain.id] == JobStatus.PENDING.value
    assert sorted(str(row.job_id) for row in events) == sorted([str(past.id), str(retrying.id)])


def _relay(engine: AsyncEngine, publisher: Any, now: datetime) -> OutboxRelay:
    """A relay of batches of 10 rows at least 2 s old, its clock stopped at `now`."""
    return OutboxRelay(
        engine,
        publisher,
        FixedClock(now),
        NO_TYPES,
        batch=10,
        min_age=timedelta(seconds=2),
        interval=timedelta(seconds=1),
    )
