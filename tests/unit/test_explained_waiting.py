"""A job the limits defer says what it waits for and until when (``Job.waiting``, noted in
batches by jobrail.worker.wait_notes), and a job type may cap how long a job waits."""

import asyncio
from collections.abc import Mapping
from dataclasses import replace
from datetime import timedelta
from typing import Any

from jobrail.jobs.domain import JobStatus, Wait, WaitsOn
from jobrail.jobs.messages import JobMessage
from jobrail.limits.model import JobLimits, Lock
from jobrail.worker.admission import LimitsAndLock
from jobrail.worker.attempt import Defer, GiveUp, JobRun
from jobrail.worker.context import JobContext
from jobrail.worker.gating import Deferred
from jobrail.worker.wait_notes import WaitNotes
from tests.fakes import FakeJobStore, FixedClock, make_job
from tests.unit.test_attempt_chain import ScriptedGate, _attempt
from tests.unit.test_attempt_chain import Worker as ChainWorker

LOCKED = JobLimits(lock=Lock(key="account:{message}", ttl_s=30))
ON_LOCK = (WaitsOn("lock", "lock", "account:hi"),)


def _deferred(seconds: float) -> Deferred:
    return Deferred(timedelta(seconds=seconds), "limited by lock", waits_on=ON_LOCK)


async def test_a_deferral_says_what_the_job_waits_for_until_when_and_since_when() -> None:
    clock = FixedClock()
    middleware = LimitsAndLock(ScriptedGate([_deferred(3)]), clock)

    verdict = await middleware.before_claim(_attempt(make_job(), LOCKED))

    assert isinstance(verdict, Defer)
    assert verdict.wait == Wait(
        on=ON_LOCK, until=clock.now() + timedelta(seconds=3), since=clock.now()
    )
    assert verdict.message.waiting_since == clock.now()


async def test_a_job_deferred_again_keeps_the_time_it_started_waiting() -> None:
    clock = FixedClock()
    started = clock.now() - timedelta(seconds=40)
    middleware = LimitsAndLock(ScriptedGate([_deferred(3)]), clock)

    verdict = await middleware.before_claim(
        _attempt(make_job(), LOCKED, deferrals=4, waiting_since=started)
    )

    assert isinstance(verdict, Defer)
    assert verdict.wait is not None
    assert verdict.wait.since == started
    assert verdict.message.waiting_since == started


async def test_past_its_types_longest_wait_the_job_gives_up_saying_what_it_waited_for() -> None:
    clock = FixedClock()
    started = clock.now() - timedelta(seconds=58)
    middleware = LimitsAndLock(ScriptedGate([_deferred(3)]), clock)
    attempt = _attempt(make_job(), LOCKED, deferrals=9, waiting_since=started)
    attempt.run = replace(attempt.run, max_wait=timedelta(seconds=60))

    verdict = await middleware.before_claim(attempt)

    assert isinstance(verdict, GiveUp)
    assert "waited longer than its type allows (60 s" in verdict.reason
    assert "limited by lock" in verdict.reason


async def test_within_its_longest_wait_the_job_is_deferred() -> None:
    clock = FixedClock()
    middleware = LimitsAndLock(ScriptedGate([_deferred(3)]), clock)
    attempt = _attempt(make_job(), LOCKED, deferrals=1, waiting_since=clock.now())
    attempt.run = replace(attempt.run, max_wait=timedelta(seconds=60))

    assert isinstance(await middleware.before_claim(attempt), Defer)


class Worker(ChainWorker):
    """The chain's worker with the limits middleware over scripted verdicts, noting waits."""

    def __init__(self, *verdicts: Any, max_wait: timedelta | None = None) -> None:
        self.ran = 0
        self.max_wait = max_wait
        # Its own clock shows the worker's time: both start at the same instant.
        super().__init__(
            LimitsAndLock(ScriptedGate(list(verdicts)), FixedClock()), notes_every_s=0.01
        )

    async def run_message(self, message: JobMessage) -> None:
        async def handler(payload: Mapping[str, Any], ctx: JobContext) -> None:
            self.ran += 1

        job_run = JobRun(handler, timedelta(seconds=30), LOCKED, max_wait=self.max_wait)
        await self.runner.run(message, job_run)


async def test_the_deferrals_of_many_jobs_are_noted_in_one_statement() -> None:
    w = Worker(*[_deferred(5) for _ in range(20)])
    jobs = [make_job() for _ in range(20)]
    for job in jobs:
        w.store.jobs[job.id] = job

    await asyncio.gather(
        *(w.run_message(JobMessage(j.id, j.type, j.queue, j.tenant_id)) for j in jobs)
    )
    await asyncio.sleep(0.05)

    assert w.store.wait_statements == 1
    for job in jobs:
        waiting = w.store.jobs[job.id].waiting
        assert waiting == Wait(
            on=ON_LOCK, until=w.clock.now() + timedelta(seconds=5), since=w.clock.now()
        )
    assert len(w.publisher.published) == 20  # every job sent round again, no attempt spent
    assert {w.store.jobs[j.id].attempts for j in jobs} == {0}


async def test_a_job_that_started_meanwhile_keeps_no_note() -> None:
    w = Worker(_deferred(5))
    job = make_job()
    w.store.jobs[job.id] = job

    await w.run_message(JobMessage(job.id, job.type, job.queue, job.tenant_id))
    w.clock.advance(timedelta(seconds=5))
    w.store.jobs[job.id].start(w.clock.now(), timedelta(seconds=30))  # before the flush
    assert w.notes is not None
    await w.notes.flush()

    assert w.store.jobs[job.id].waiting is None


async def test_starting_clears_what_the_job_waited_for() -> None:
    job = make_job()
    job.waiting = Wait(on=ON_LOCK, until=job.created_at, since=job.created_at)

    job.start(job.created_at, timedelta(seconds=30))

    assert job.waiting is None


async def test_a_job_that_waited_too_long_fails_without_running_and_is_dead_lettered() -> None:
    w = Worker(_deferred(3), max_wait=timedelta(seconds=10))
    job = make_job()
    w.store.jobs[job.id] = job
    since = w.clock.now() - timedelta(seconds=20)

    await w.run_message(
        JobMessage(job.id, job.type, job.queue, job.tenant_id, deferrals=6, waiting_since=since)
    )

    failed = w.store.jobs[job.id]
    assert failed.status is JobStatus.FAILED
    assert w.ran == 0
    assert failed.last_error is not None
    assert failed.last_error.startswith("waited longer than its type allows (10 s")
    [letter] = w.dispatcher.dispatched
    assert letter.queue == "jobs.dlq"
    assert any("waited longer" in value for value in letter.headers.values())


async def test_notes_a_store_refuses_are_dropped_without_failing_anything() -> None:
    store = FakeJobStore()

    class Broken(FakeJobStore):
        async def note_waits(self, notes: Any) -> None:
            raise RuntimeError("database away")

    notes = WaitNotes(Broken(), interval_s=0)
    job = make_job()
    store.jobs[job.id] = job
    notes.note(job.id, Wait(on=ON_LOCK, until=job.created_at, since=job.created_at), job.created_at)

    await notes.flush()

    assert notes.written == 0


async def test_closing_writes_the_notes_taken_at_once_and_leaves_no_write_behind() -> None:
    # At shutdown: nothing noted is lost, and no write is left to run after the store
    # has closed its connections.
    store = FakeJobStore()
    job = make_job()
    store.jobs[job.id] = job
    notes = WaitNotes(store, interval_s=60)
    wait = Wait(on=ON_LOCK, until=job.created_at, since=job.created_at)
    notes.note(job.id, wait, job.created_at)

    await asyncio.wait_for(notes.close(), timeout=5)  # not after the 60 s interval

    assert store.jobs[job.id].waiting == wait
    assert (store.wait_statements, notes.written) == (1, 1)
    assert [t for t in asyncio.all_tasks() if t.get_name() == "wait-notes"] == []


async def test_a_lock_s_deferral_names_the_job_that_holds_it() -> None:
    from jobrail.limits.counters import LimitCounters
    from jobrail.limits.memory import MemoryLimits
    from jobrail.worker.gate import GateConfig, JobGate
    from jobrail.worker.gating import job_owner

    gate = JobGate(MemoryLimits(), LimitCounters(), GateConfig())
    holder, waiter = make_job(), make_job()
    keys = LOCKED.keys({"message": "hi"})

    held = await gate.enter(LOCKED, keys, owner=job_owner(holder.id))
    turned_away = await gate.enter(LOCKED, keys, owner=job_owner(waiter.id))

    assert not isinstance(held, Deferred)
    assert isinstance(turned_away, Deferred)
    assert turned_away.waits_on == (WaitsOn("lock", "lock", "account:hi", str(holder.id)),)


def test_a_holder_token_names_its_job_and_any_other_token_none() -> None:
    from jobrail.worker.gate import holder_token
    from jobrail.worker.gating import job_owner, owner_job

    job = make_job()

    assert owner_job(holder_token(job_owner(job.id))) == str(job.id)
    assert owner_job(holder_token()) is None  # an admission for no job
    assert owner_job("not-a-job/abc") is None
    assert owner_job(None) is None


def test_a_note_keeps_the_lock_s_holder_and_an_older_note_reads_as_before() -> None:
    clock = FixedClock()
    on = (WaitsOn("lock", "lock", "account:hi", "f" * 8), WaitsOn("rate_limit", "vendor", "v"))
    wait = Wait(on=on, until=clock.now(), since=clock.now())

    document = wait.as_json()

    assert Wait.from_json(document) == wait
    assert document["on"][1] == {"kind": "rate_limit", "name": "vendor", "key": "v"}
    assert Wait.from_json({**document, "on": [document["on"][1]]}) == replace(wait, on=on[1:])
