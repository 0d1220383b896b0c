"""The fast path under fair dispatch, on SQLite and Postgres alike: while a queue has no
held backlog, its dispatcher gives the queue a credit (``dispatch_gates``) of the room
left in the broker; that many enqueues publish their jobs at once (a message, no hold,
no note), and the next ones hold theirs, however many come at once. A backlog or a
pause takes the credit away."""

import asyncio
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import insert, select, update

from jobrail.store.dialects import hold_gates
from jobrail.store.pauses import SqlaPauses
from jobrail.store.tables import dispatch_arrivals, dispatch_gates, jobs, outbox
from tests.fakes import START
from tests.support.dispatch_store import ReadyCount, SentMessages, Subject, held, make_dispatcher

QUEUE = "jobs.default"
TARGET = 8


async def _credit(subject: Subject) -> int | None:
    async with subject.engine.connect() as conn:
        found = await conn.scalar(
            select(dispatch_gates.c.credit).where(dispatch_gates.c.queue == QUEUE)
        )
    return None if found is None else int(found)


async def test_with_no_credit_set_an_enqueue_holds_its_job(subject: Subject) -> None:
    job = await subject.add(held("a"))

    assert job.held_since is not None
    assert await subject.count(outbox) == 0
    assert await subject.count(dispatch_arrivals) == 1


async def test_the_credit_lets_that_many_jobs_out_and_holds_the_next_ones(
    subject: Subject,
) -> None:
    await subject.store.gate(QUEUE, 3)

    # At once (on Postgres the adds of one loop turn share one statement), then one more.
    first = await asyncio.gather(*(subject.add(held("a")) for _ in range(5)))
    later = await subject.add(held("a"))

    out = [job for job in first if job.held_since is None]
    assert len(out) == 3, "the credit's worth went out at once"
    assert later.held_since is not None
    assert await subject.count(outbox) == 3  # a message for each released job alone
    assert await subject.count(jobs, jobs.c.held_since.is_(None)) == 3
    assert {job.id for job in out} == {
        row.id
        for row in await _rows(subject, jobs.c.held_since.is_(None))  # as the store says
    }
    assert await subject.count(dispatch_arrivals) == 1  # the held ones' tenant
    assert (await _credit(subject) or 0) <= 0


async def _rows(subject: Subject, *where: object) -> Sequence[object]:
    async with subject.engine.connect() as conn:
        return (await conn.execute(select(jobs.c.id).where(*where))).all()  # type: ignore[arg-type]


async def test_setting_the_credit_writes_only_a_change(subject: Subject) -> None:
    await subject.store.gate(QUEUE, 0)
    assert await _credit(subject) is None  # no row made to say "none"

    await subject.store.gate(QUEUE, 5)
    await subject.add(held("a"))
    assert await _credit(subject) == 4
    await subject.store.gate(QUEUE, 5)
    assert await _credit(subject) == 5
    await subject.store.gate(QUEUE, 0)
    assert (await _credit(subject) or 0) <= 0


async def test_a_gate_a_held_job_found_spent_is_not_topped_up_until_a_pass_saw_it(
    subject: Subject,
) -> None:
    await subject.store.gate(QUEUE, 1)
    first = await subject.add(held("a"))
    second = await subject.add(held("a"))  # the credit is spent: held, and the gate marked
    assert first.held_since is None
    assert second.held_since is not None

    await subject.store.gate(QUEUE, 5)  # a pass that looked before the second was held
    assert (await _credit(subject) or 0) <= 0
    await subject.store.gate(QUEUE, 0)  # the pass that saw it (its backlog) closes it
    await subject.store.gate(QUEUE, 5)  # and once that is released, the credit is back
    assert await _credit(subject) == 5


async def test_the_dispatcher_gives_the_room_left_while_nothing_is_held(
    subject: Subject,
) -> None:
    gauge, sender = ReadyCount(3), SentMessages()
    dispatcher = make_dispatcher(subject, gauge, sender, TARGET)

    await dispatcher.pass_once(QUEUE)
    assert await _credit(subject) == TARGET - 3

    gauge.count = TARGET + 2  # the workers fell behind: no room
    await dispatcher.pass_once(QUEUE)
    assert (await _credit(subject) or 0) <= 0


async def test_a_backlog_or_a_pause_takes_the_credit_away(subject: Subject) -> None:
    gauge, sender = ReadyCount(0), SentMessages()
    dispatcher = make_dispatcher(subject, gauge, sender, TARGET)
    await dispatcher.pass_once(QUEUE)
    assert await _credit(subject) == TARGET

    jobs_ = await asyncio.gather(*(subject.add(held("a")) for _ in range(TARGET + 4)))
    assert sum(job.held_since is not None for job in jobs_) == 4
    gauge.count = TARGET  # the ones that went out wait in the broker
    await dispatcher.pass_once(QUEUE)  # learns of the held ones: a backlog
    assert (await _credit(subject) or 0) <= 0
    assert sender.messages == []  # and no room to release them yet

    gauge.count = 0
    await dispatcher.pass_once(QUEUE)
    assert len(sender.messages) == 4  # released in a pass, behind the fast ones
    await dispatcher.pass_once(QUEUE)  # their line is empty now
    await dispatcher.pass_once(QUEUE)
    assert await _credit(subject) == TARGET

    await SqlaPauses(subject.engine).pause("tenant", "zed", START + timedelta(seconds=1))
    await dispatcher.pass_once(QUEUE)
    assert (await _credit(subject) or 0) <= 0


async def test_a_pause_takes_the_credit_away_at_once(subject: Subject) -> None:
    await subject.store.gate(QUEUE, 5)

    await SqlaPauses(subject.engine).pause("tenant", "a", START)
    job = await subject.add(held("a"))  # before any pass has seen the pause

    assert job.held_since is not None
    assert (await _credit(subject) or 0) <= 0


async def test_a_credit_given_after_a_pause_the_pass_did_not_see_is_not_given(
    subject: Subject,
) -> None:
    # A pass read "nothing paused"; the pause committed; then the pass wrote its credit.
    # A job enqueued after the pause must not go out through that credit.
    await SqlaPauses(subject.engine).pause("queue", QUEUE, START)

    given = await subject.store.gate(QUEUE, 5)
    job = await subject.add(held("a"))

    assert not given
    assert (await _credit(subject) or 0) <= 0
    assert job.held_since is not None
    assert await subject.count(outbox) == 0


@pytest.mark.parametrize("row", ["made", "updated"])
async def test_a_pause_waits_for_a_credit_being_written_and_takes_it_away(
    subject: Subject, row: str
) -> None:
    g = dispatch_gates
    if row == "updated":
        await subject.store.gate(QUEUE, 5)
        await subject.store.gate(QUEUE, 0)  # the gate row exists, closed
        write: Any = update(g).where(g.c.queue == QUEUE).values(credit=5)
    else:  # the queue's first credit makes its gate row
        write = insert(g).values(queue=QUEUE, credit=5)
    async with subject.engine.connect() as writer:
        # A dispatcher's gate write under way (as DispatchStore.gate writes it): its
        # credit not committed yet, nor checked against a pause not committed yet.
        await hold_gates(writer, alone=False)
        await writer.execute(write)
        pausing = asyncio.ensure_future(SqlaPauses(subject.engine).pause("queue", QUEUE, START))
        await asyncio.sleep(0.3)
        waited = not pausing.done()
        await writer.commit()
    await pausing

    assert waited, "the pause went past the credit being written"
    assert (await _credit(subject) or 0) <= 0
    job = await subject.add(held("a"))
    assert job.held_since is not None
