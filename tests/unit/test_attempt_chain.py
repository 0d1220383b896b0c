"""The attempt's middleware chain (jobrail.worker.attempt) as the runner runs it, and the
limits-and-lock middleware (jobrail.worker.admission) on its own over a scripted gate."""

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from jobrail.jobs.domain import Job, JobStatus, Wait, WaitsOn
from jobrail.jobs.messages import JobMessage
from jobrail.jobs.retry import RetryPolicy
from jobrail.limits.model import JobLimits, Lock, TokenBucket
from jobrail.worker.admission import Held, LimitsAndLock
from jobrail.worker.attempt import (
    Attempt,
    AttemptMiddleware,
    Defer,
    Ending,
    GiveBack,
    GiveUp,
    JobRun,
    NotStartable,
    Step,
)
from jobrail.worker.context import JobContext
from jobrail.worker.gating import Deferred, job_owner
from jobrail.worker.runner import JobRunner, RunnerConfig
from jobrail.worker.wait_notes import WaitNotes
from jobrail.worker.watchdog import Kept
from tests.fakes import START, FakeDispatcher, FakeJobStore, FakePublisher, FixedClock, make_job

TIMEOUT = timedelta(seconds=30)
LOCKED = JobLimits(lock=Lock(key="account:{message}", ttl_s=30))


class Recording:
    """A middleware that writes down each hook it is called at, and may be told to turn
    the attempt away or to fail at one of them."""

    def __init__(
        self,
        name: str,
        events: list[str],
        *,
        applies: bool = True,
        stop: Any = None,
        fail_at: str = "",
    ) -> None:
        self.name = name
        self.events = events
        self.applies = applies
        self.stop = stop
        self.fail_at = fail_at
        self.left: list[Attempt] = []

    def applies_to(self, run: JobRun) -> bool:
        return self.applies

    def _hook(self, hook: str) -> None:
        self.events.append(f"{self.name}.{hook}")
        if self.fail_at == hook:
            raise RuntimeError(f"{self.name} broke in {hook}")

    async def __call__(self, attempt: Attempt, call_next: Step) -> Ending:
        self._hook("before_claim")
        if isinstance(self.stop, Defer | NotStartable | GiveUp):
            return self.stop

        async def claimed(attempt: Attempt) -> GiveBack | None:
            self._hook("after_claim")
            return self.stop if isinstance(self.stop, GiveBack) else None

        attempt.on_claimed += (claimed,)
        try:
            return await call_next(attempt)
        finally:
            self.left.append(attempt)
            self._hook("after_attempt")


class Worker:
    def __init__(self, *middleware: AttemptMiddleware, notes_every_s: float | None = None) -> None:
        self.clock = FixedClock()
        self.store = FakeJobStore()
        self.notes = WaitNotes(self.store, notes_every_s) if notes_every_s is not None else None
        self.publisher = FakePublisher()
        self.dispatcher = FakeDispatcher()
        self.events: list[str] = []
        self.runner = JobRunner(
            self.store,
            self.dispatcher,
            self.publisher,
            self.clock,
            RetryPolicy(base_s=1, cap_s=60, jitter=False),
            RunnerConfig(
                dead_letter_queue="jobs.dlq",
                lease_grace=timedelta(seconds=10),
                store_retry_max=timedelta(milliseconds=1),
            ),
            middleware,
            wait_notes=self.notes,
            sleep=self.sleep,
        )

    async def sleep(self, seconds: float) -> None:
        self.clock.advance(timedelta(seconds=seconds))

    def add(self) -> Job:
        job = make_job()
        self.store.jobs[job.id] = job
        return job

    def delivery(self, job: Job) -> JobMessage:
        return JobMessage(job.id, job.type, job.queue, job.tenant_id, "m1")

    async def run(self, job: Job, limits: JobLimits | None = None) -> Job:
        async def handler(payload: Mapping[str, Any], ctx: JobContext) -> None:
            self.events.append("handler")

        run = JobRun(handler, TIMEOUT, limits or JobLimits())
        await self.runner.run(self.delivery(job), run)
        return self.store.jobs[job.id]


async def test_the_chain_lets_in_first_to_last_and_is_told_the_end_last_to_first() -> None:
    events: list[str] = []
    w = Worker(Recording("a", events), Recording("b", events))
    w.events = events

    job = await w.run(w.add())

    assert job.status is JobStatus.SUCCEEDED
    assert events == [
        "a.before_claim",
        "b.before_claim",
        "a.after_claim",
        "b.after_claim",
        "handler",
        "b.after_attempt",
        "a.after_attempt",
    ]


async def test_a_middleware_that_does_not_apply_to_the_job_type_is_never_called() -> None:
    events: list[str] = []
    w = Worker(Recording("a", events, applies=False), Recording("b", events))

    assert (await w.run(w.add())).status is JobStatus.SUCCEEDED
    assert events == ["b.before_claim", "b.after_claim", "b.after_attempt"]


async def test_a_deferral_before_the_claim_spends_no_attempt_and_releases_those_before() -> None:
    events: list[str] = []
    a, b = Recording("a", events), Recording("b", events)
    w = Worker(a, b)
    job = w.add()
    later = w.clock.now() + timedelta(seconds=5)
    b.stop = Defer(w.delivery(job).again(later, deferred=True))

    done = await w.run(job)

    assert done.status is JobStatus.PENDING
    assert done.attempts == 0
    [again] = w.publisher.published
    assert again.not_before == later
    assert events == ["a.before_claim", "b.before_claim", "a.after_attempt"]
    [left] = a.left
    assert left.job is None  # never claimed: what it took is refunded


async def test_a_job_that_cannot_start_goes_where_an_unclaimed_delivery_goes() -> None:
    events: list[str] = []
    a = Recording("a", events)
    w = Worker(a)
    job = w.add()
    w.store.jobs[job.id].cancel(w.clock.now())
    a.stop = NotStartable(w.store.jobs[job.id], w.clock.now())

    done = await w.run(job)

    assert done.status is JobStatus.CANCELLED
    assert w.publisher.published == []  # a finished job: acknowledged, nothing sent
    assert events == ["a.before_claim"]


async def test_a_give_back_after_the_claim_returns_the_attempt_and_sends_the_message_round() -> (
    None
):
    events: list[str] = []
    a = Recording("a", events)
    w = Worker(a, Recording("b", events))
    job = w.add()
    later = w.clock.now() + timedelta(seconds=7)
    message = w.delivery(job).again(later, deferred=True)
    a.stop = GiveBack(message, "limited by vendor", w.clock.now())

    done = await w.run(job)

    assert "handler" not in events
    assert done.status is JobStatus.RETRYING
    assert done.attempts == 0  # given back
    assert done.run_after == later
    assert done.last_error == "limited by vendor"
    [again] = w.dispatcher.dispatched
    assert again.not_before == later
    assert events == [
        "a.before_claim",
        "b.before_claim",
        "a.after_claim",
        "b.after_attempt",
        "a.after_attempt",
    ]


async def test_a_middleware_failing_before_the_claim_does_not_lose_the_delivery() -> None:
    events: list[str] = []
    w = Worker(Recording("a", events), Recording("b", events, fail_at="before_claim"))

    done = await w.run(w.add())

    assert done.status is JobStatus.PENDING
    assert done.attempts == 0
    [again] = w.publisher.published  # sent round again, later
    assert again.not_before is not None
    assert again.not_before > w.clock.now()
    assert json.loads(again.body)["labels"]["deferrals"] == 1
    assert events == ["a.before_claim", "b.before_claim", "a.after_attempt"]


async def test_a_limited_job_with_no_middleware_to_enforce_its_limits_never_runs() -> None:
    w = Worker()  # a chain built without the limits' middleware

    done = await w.run(w.add(), JobLimits(lock=Lock(key="account:{account_id}", ttl_s=30)))

    assert w.events == []  # the handler never ran unlimited
    assert done.status is JobStatus.PENDING
    assert done.attempts == 0
    [again] = w.publisher.published  # sent round again, later, as any error before the claim
    assert again.not_before is not None
    assert again.not_before > w.clock.now()


async def test_a_middleware_failing_after_the_claim_leaves_the_job_to_its_lease() -> None:
    events: list[str] = []
    w = Worker(Recording("a", events), Recording("b", events, fail_at="after_claim"))

    done = await w.run(w.add())

    assert "handler" not in events
    # Claimed: the job keeps its lease, and the lease sweep sends it round when it ends.
    assert done.status is JobStatus.RUNNING
    assert done.lease_until is not None
    assert events[-2:] == ["b.after_attempt", "a.after_attempt"]


async def test_a_middleware_failing_after_the_attempt_loses_no_outcome_and_no_release() -> None:
    events: list[str] = []
    w = Worker(Recording("a", events), Recording("b", events, fail_at="after_attempt"))

    async def fails(payload: Mapping[str, Any], ctx: JobContext) -> None:
        raise ValueError("boom")

    job = w.add()
    await w.runner.run(w.delivery(job), JobRun(fails, TIMEOUT))

    assert events[-2:] == ["b.after_attempt", "a.after_attempt"]
    done = w.store.jobs[job.id]
    assert done.status is JobStatus.RETRYING
    [retry] = w.dispatcher.dispatched  # the outcome's message still leaves
    assert retry.not_before == done.run_after


# The limits-and-lock middleware over a scripted gate.


@dataclass
class FakeAdmitted:
    fence: int | None = 7
    kept: Kept | None = None
    released: list[bool] = field(default_factory=list)
    start_within: timedelta | None = None

    def started(self) -> None:
        pass

    async def release(self, *, refund: bool = False) -> None:
        self.released.append(refund)


@dataclass
class ScriptedGate:
    """Answers each `enter` with the next verdict, writing down how it was asked."""

    verdicts: list[Any]
    asked: list[dict[str, Any]] = field(default_factory=list)
    prepaid: list[tuple[str, ...]] = field(default_factory=list)

    async def enter(
        self,
        declared: JobLimits,
        keys: Sequence[str],
        deferrals: int = 0,
        prepaid: Sequence[str] = (),
        outages: int = 0,
        owner: str = "",
        take_over: bool = False,
    ) -> Any:
        self.asked.append({"keys": list(keys), "owner": owner, "take_over": take_over})
        self.prepaid.append(tuple(prepaid))
        return self.verdicts.pop(0)


class Kept1s:
    renew_every_s = 1.0

    def left_s(self) -> float:
        return 2.0

    async def renew(self) -> bool:
        return True

    def taken(self) -> Exception:
        return RuntimeError("taken")

    def lapsed(self, late_s: float) -> Exception:
        return RuntimeError("lapsed")


def _attempt(job: Job, limits: JobLimits, **message: Any) -> Attempt:
    async def read() -> Job | None:
        return job

    async def handler(payload: Mapping[str, Any], ctx: JobContext) -> None:
        return None

    delivery = JobMessage(job.id, job.type, job.queue, job.tenant_id, "m1", **message)
    return Attempt(delivery, JobRun(handler, TIMEOUT, limits), read)


def test_it_applies_only_to_job_types_that_declare_limits() -> None:
    middleware = LimitsAndLock(ScriptedGate([]), FixedClock())
    job = make_job()

    assert middleware.applies_to(_attempt(job, LOCKED).run)
    assert not middleware.applies_to(_attempt(job, JobLimits()).run)


async def test_admitted_it_gives_the_fence_and_the_leases_to_the_attempt_and_releases_after() -> (
    None
):
    admitted = FakeAdmitted(fence=41, kept=Kept1s())
    gate = ScriptedGate([admitted])
    middleware = LimitsAndLock(gate, FixedClock())
    job = make_job()
    attempt = _attempt(job, LOCKED)

    held = await middleware.before_claim(attempt)
    assert held == Held(("account:hi",), admitted)
    attempt.job = job
    assert await middleware.after_claim(attempt, held) == held
    await middleware.after_attempt(attempt, held)

    assert gate.asked == [{"keys": ["account:hi"], "owner": job_owner(job.id), "take_over": False}]
    assert attempt.fence == 41
    assert attempt.kept == (admitted.kept,)
    assert admitted.released == [False]


async def test_a_job_never_claimed_gets_its_tokens_refunded() -> None:
    admitted = FakeAdmitted()
    middleware = LimitsAndLock(ScriptedGate([admitted]), FixedClock())
    attempt = _attempt(make_job(), LOCKED)

    held = await middleware.before_claim(attempt)
    assert isinstance(held, Held)
    await middleware.after_attempt(attempt, held)

    assert admitted.released == [True]


async def test_denied_it_defers_the_message_with_its_reservations() -> None:
    clock = FixedClock()
    denied = Deferred(timedelta(seconds=3), "limited by vendor", prepaid=("e1:vendor:acme",))
    middleware = LimitsAndLock(ScriptedGate([denied]), clock)
    bucket = JobLimits(
        limits=[TokenBucket("vendor", key="vendor:{tenant_id}", capacity=1, per_second=1)]
    )

    verdict = await middleware.before_claim(_attempt(make_job(), bucket, deferrals=2))

    assert isinstance(verdict, Defer)
    assert verdict.message.not_before == clock.now() + timedelta(seconds=3)
    assert verdict.message.deferrals == 3
    assert verdict.message.prepaid == ("e1:vendor:acme",)


async def test_a_message_without_its_keys_whose_job_cannot_start_is_not_admitted() -> None:
    gate = ScriptedGate([])
    clock = FixedClock()
    job = make_job()
    job.cancel(clock.now())

    verdict = await LimitsAndLock(gate, clock).before_claim(_attempt(job, LOCKED))

    assert verdict == NotStartable(job, clock.now())
    assert gate.asked == []


async def test_held_only_by_its_own_earlier_admission_it_takes_them_over_once_claimed() -> None:
    taken = FakeAdmitted(fence=9)
    own = Deferred(timedelta(seconds=30), "limited by lock", own=True)
    gate = ScriptedGate([own, taken])
    middleware = LimitsAndLock(gate, FixedClock())
    job = make_job()
    attempt = _attempt(job, LOCKED, limit_keys=("account:hi",))

    held = await middleware.before_claim(attempt)
    assert held == Held(("account:hi",), None)  # claim first
    attempt.job = job
    after = await middleware.after_claim(attempt, held)
    await middleware.after_attempt(attempt, after)  # type: ignore[arg-type]

    assert [asked["take_over"] for asked in gate.asked] == [False, True]
    assert after == Held(("account:hi",), taken)
    assert attempt.fence == 9
    assert taken.released == [False]


async def test_turned_away_at_its_takeover_it_gives_the_claim_back() -> None:
    clock = FixedClock()
    own = Deferred(timedelta(seconds=30), "limited by lock", own=True)
    denied = Deferred(timedelta(seconds=2), "limited by vendor")
    middleware = LimitsAndLock(ScriptedGate([own, denied]), clock)
    job = make_job()
    attempt = _attempt(job, LOCKED, limit_keys=("account:hi",))

    held = await middleware.before_claim(attempt)
    assert isinstance(held, Held)
    attempt.job = job
    given = await middleware.after_claim(attempt, held)
    await middleware.after_attempt(attempt, held)  # nothing held: nothing to release

    assert isinstance(given, GiveBack)
    assert given.reason == "limited by vendor"
    assert given.run_after == clock.now() + timedelta(seconds=2)
    assert given.message.deferrals == 1
    assert attempt.fence is None


# A token bucket keeps to its rate where the handler starts: a job whose claim took
# longer than its tokens allow competes for them again.

BUCKET = JobLimits(
    limits=[TokenBucket("vendor", key="vendor:{tenant_id}", capacity=5, per_second=5)]
)
RESERVED = "0123456789abcdef@1000.0:vendor:acme"


async def test_a_job_that_starts_on_time_uses_its_admission() -> None:
    clock = FixedClock()
    admitted = FakeAdmitted(start_within=timedelta(milliseconds=50))
    gate = ScriptedGate([admitted])
    middleware = LimitsAndLock(gate, clock)
    job = make_job()
    attempt = _attempt(job, BUCKET)

    held = await middleware.before_claim(attempt)
    assert held == Held(("vendor:acme",), admitted, clock.now() + timedelta(milliseconds=50))
    clock.advance(timedelta(milliseconds=50))  # its claim took all the room there was
    attempt.job = job

    assert await middleware.after_claim(attempt, held) == held
    assert len(gate.asked) == 1


async def test_a_job_claimed_too_late_for_its_tokens_is_admitted_again_without_them() -> None:
    clock = FixedClock()
    late = FakeAdmitted(fence=7, start_within=timedelta(milliseconds=50))
    again = FakeAdmitted(fence=8, start_within=timedelta(milliseconds=50))
    gate = ScriptedGate([late, again])
    middleware = LimitsAndLock(gate, clock)
    job = make_job()
    attempt = _attempt(job, BUCKET, prepaid=(RESERVED,))

    held = await middleware.before_claim(attempt)
    assert isinstance(held, Held)
    clock.advance(timedelta(seconds=1))  # the database stalled on its claim
    attempt.job = job
    after = await middleware.after_claim(attempt, held)

    assert after == Held(("vendor:acme",), again, clock.now() + timedelta(milliseconds=50))
    assert attempt.fence == 8
    # Its reservation went with the first admission: the second one competes, and takes
    # over what the first holds (its tokens are not given back: their time has gone).
    assert gate.prepaid == [(RESERVED,), ()]
    assert [asked["take_over"] for asked in gate.asked] == [False, True]
    assert late.released == []


async def test_a_job_claimed_too_late_that_the_bucket_turns_away_gives_its_claim_back() -> None:
    clock = FixedClock()
    late = FakeAdmitted(start_within=timedelta(milliseconds=50))
    denied = Deferred(timedelta(seconds=2), "limited by vendor", prepaid=(RESERVED,))
    middleware = LimitsAndLock(ScriptedGate([late, denied]), clock)
    job = make_job()
    attempt = _attempt(job, BUCKET)

    held = await middleware.before_claim(attempt)
    assert isinstance(held, Held)
    clock.advance(timedelta(seconds=1))
    attempt.job = job
    given = await middleware.after_claim(attempt, held)

    assert isinstance(given, GiveBack)
    assert given.message.not_before == clock.now() + timedelta(seconds=2)
    assert given.message.prepaid == (RESERVED,)
    assert late.released == [False]  # what it held goes back; no tokens


async def test_a_job_late_again_after_its_second_admission_gives_its_claim_back() -> None:
    clock = FixedClock()
    late = FakeAdmitted(start_within=timedelta(milliseconds=50))
    again = FakeAdmitted(start_within=timedelta(milliseconds=-1))  # no room at all
    middleware = LimitsAndLock(ScriptedGate([late, again]), clock)
    job = make_job()
    attempt = _attempt(job, BUCKET)

    held = await middleware.before_claim(attempt)
    assert isinstance(held, Held)
    clock.advance(timedelta(seconds=1))
    attempt.job = job
    given = await middleware.after_claim(attempt, held)

    assert isinstance(given, GiveBack)
    assert given.message.not_before is not None
    assert given.message.not_before > clock.now()
    assert again.released == [False]
    assert late.released == [False]


class BrokenFilter(Recording):
    def applies_to(self, run: JobRun) -> bool:
        raise RuntimeError("applies_to broke")


async def test_a_middleware_failing_to_say_whether_it_applies_does_not_lose_the_delivery() -> None:
    w = Worker(BrokenFilter("a", []))

    done = await w.run(w.add())

    assert w.events == []
    assert done.status is JobStatus.PENDING
    [again] = w.publisher.published  # sent round again, later, as any error before the claim
    assert again.not_before is not None
    assert again.not_before > w.clock.now()


async def test_a_job_that_gives_up_while_another_attempt_holds_it_waits_out_that_lease() -> None:
    events: list[str] = []
    a = Recording("a", events, stop=GiveUp("waited longer than its type allows"))
    w = Worker(a)
    job = w.add()
    job.start(w.clock.now(), timedelta(seconds=5))  # a dead worker's attempt, its lease live

    done = await w.run(job)

    # Held here until that lease ended, then claimed and failed: not sent to the back of
    # the queue behind a delay tier.
    assert w.publisher.published == []
    assert done.status is JobStatus.FAILED
    assert done.last_error == "waited longer than its type allows"
    [letter] = w.dispatcher.dispatched
    assert letter.queue == "jobs.dlq"
    assert w.clock.now() >= START + timedelta(seconds=5)


async def test_a_give_back_notes_what_turned_the_job_away_so_it_waits_on_that() -> None:
    limits = Recording("limits", [])
    w = Worker(limits, notes_every_s=0)
    job = w.add()
    now = w.clock.now()
    later = now + timedelta(seconds=3)
    on = (WaitsOn("rate_limit", "vendor", "vendor:acme"),)
    message = w.delivery(job).again(later, deferred=True)
    limits.stop = GiveBack(message, "limited", now, Wait(on=on, until=later, since=now))

    done = await w.run(job)
    assert w.notes is not None
    await w.notes.close()

    assert done.status is JobStatus.RETRYING
    assert done.waiting == Wait(on=on, until=later, since=now)


async def test_a_give_back_is_sent_even_if_a_middleware_fails_as_it_lets_go() -> None:
    events: list[str] = []
    a = Recording("a", events, fail_at="after_attempt")
    b = Recording("b", events)
    w = Worker(a, b)
    job = w.add()
    later = w.clock.now() + timedelta(seconds=7)
    b.stop = GiveBack(w.delivery(job).again(later, deferred=True), "limited", w.clock.now())

    done = await w.run(job)

    assert done.status is JobStatus.RETRYING
    assert done.attempts == 0
    [again] = w.dispatcher.dispatched
    assert again.not_before == later
