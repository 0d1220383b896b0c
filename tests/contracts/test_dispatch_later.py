"""Jobs held for later under fair dispatch (`run_at`, `delay`), on SQLite and Postgres
alike: they wait held, outside the fast path, and join their tenant's line when they
come due (the dispatcher looks for those every DUE_EVERY_S), in fair order with the
jobs already waiting."""

import asyncio
from datetime import timedelta

from jobrail.dispatch.use_cases import DUE_EVERY_S, JobDispatcher
from jobrail.settings import DispatchSettings
from tests.fakes import NO_TYPES, START, FixedClock
from tests.support.dispatch_store import ReadyCount, SentMessages, Subject, held

QUEUE = "jobs.default"


def _dispatcher(subject: Subject, clock: FixedClock, sender: SentMessages) -> JobDispatcher:
    settings = DispatchSettings(enabled=True, ready_target=8)
    return JobDispatcher(
        subject.store, ReadyCount(0), sender, NO_TYPES, clock, settings, [QUEUE], "me"
    )


async def test_a_job_held_for_later_is_released_once_due_and_not_before(
    subject: Subject,
) -> None:
    later = await subject.add(held("a", run_after=START + timedelta(seconds=30)))
    assert later.held_since is not None  # held, with no message
    clock, sender = FixedClock(START), SentMessages()
    dispatcher = _dispatcher(subject, clock, sender)

    await dispatcher.pass_once(QUEUE)  # it finds the line, but nothing in it is due
    clock.advance(timedelta(seconds=29))
    await asyncio.sleep(DUE_EVERY_S)
    await dispatcher.pass_once(QUEUE)
    assert sender.messages == []

    clock.advance(timedelta(seconds=2))
    await asyncio.sleep(DUE_EVERY_S)
    await dispatcher.pass_once(QUEUE)  # it came due: its line is found again
    await dispatcher.pass_once(QUEUE)
    assert [m.job_id for m in sender.messages] == [later.id]


async def test_a_credit_lets_out_only_jobs_due_now(subject: Subject) -> None:
    await subject.store.gate(QUEUE, 5)

    later = await subject.add(held("a", run_after=START + timedelta(seconds=30)))
    now = await subject.add(held("a"))

    assert later.held_since is not None
    assert now.held_since is None
