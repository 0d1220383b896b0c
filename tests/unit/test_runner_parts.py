"""The runner's parts on their own: the backoff, the error classification, the retry
decision and what it sends, where a message goes that cannot run now, the takeover of a
dead worker's job, and the watchdog."""

import asyncio
import contextlib
import logging
import uuid
from datetime import timedelta
from typing import Any

import pytest

from jobrail.jobs.domain import IllegalTransitionError, Job, JobStatus
from jobrail.jobs.messages import DeadLetterMessage, JobMessage
from jobrail.jobs.registry import JobSpec
from jobrail.jobs.retry import RetryPolicy, backoff
from jobrail.kernel.errors import (
    BrokerUnavailableError,
    PermanentError,
    StoreUnavailableError,
    ThrottledError,
    TransientError,
)
from jobrail.kernel.ids import JobId
from jobrail.limits.model import JobLimits, LimitsUnavailableError, TokenBucket
from jobrail.worker.cancel_watch import WatchedCancel
from jobrail.worker.context import JobCancelledError
from jobrail.worker.outcomes import (
    HOLD_LEASES,
    ComeBack,
    Done,
    Next,
    Refuse,
    Verdict,
    classify,
    conclude,
    leased_elsewhere,
    retry_limit,
    sent_on,
    stored_result,
    unclaimed,
    wait_out_lease,
    when_due,
)
from jobrail.worker.watchdog import LeaseLostError, Watchdog
from tests.fakes import START, FixedClock, make_job

TIMEOUT = timedelta(seconds=30)


def test_the_backoff_doubles_from_its_base_up_to_its_cap() -> None:
    assert [backoff(n, 0.5, 3.0) for n in range(5)] == [0.5, 1.0, 2.0, 3.0, 3.0]
    assert backoff(-1, 0.5, 3.0) == 0.5
    assert backoff(10_000, 1.0, 60.0) == 60.0  # no overflow


def test_a_job_type_may_set_its_own_retry_base_and_cap() -> None:
    policy = RetryPolicy(base_s=1.0, cap_s=60.0, jitter=False)

    assert policy.for_type(None, None) is policy
    own = policy.for_type(0.1, 0.4)
    assert [own.delay(n).total_seconds() for n in (1, 2, 3, 4)] == [0.1, 0.2, 0.4, 0.4]
    assert policy.for_type(None, 2.0).delay(5).total_seconds() == 2.0


def test_a_job_type_refuses_a_retry_base_that_is_not_positive() -> None:
    async def handler(payload: object, ctx: object) -> None:
        return None

    from pydantic import BaseModel

    class P(BaseModel):
        pass

    with pytest.raises(ValueError, match="retry_base_s must be positive"):
        JobSpec(name="t.bad", handler=handler, payload=P, retry_base_s=0)


@pytest.mark.parametrize(
    ("exc", "expected", "unknown"),
    [
        (JobCancelledError(), Next.CANCEL, False),
        (LeaseLostError("lapsed", unconfirmed=True), Next.GIVE_BACK, False),
        (LeaseLostError("taken over"), Next.RETRY, False),
        (PermanentError("no"), Next.FAIL, False),
        (ThrottledError("429", retry_after_s=7), Next.THROTTLE, False),
        (TransientError("flaky"), Next.RETRY, False),
        (StoreUnavailableError("db"), Next.RETRY, False),
        (BrokerUnavailableError("mq"), Next.RETRY, False),
        (LimitsUnavailableError("redis"), Next.RETRY, False),
        (TimeoutError(), Next.RETRY, False),
        (KeyError("bug"), Next.RETRY, True),
    ],
)
def test_every_ending_of_an_attempt_has_its_verdict(
    exc: BaseException, expected: Next, unknown: bool
) -> None:
    verdict = classify(exc, TIMEOUT)

    assert verdict.next is expected
    assert verdict.unknown is unknown


def test_the_verdicts_say_why() -> None:
    assert classify(TimeoutError(), TIMEOUT).error == "timed out after 30s"
    assert (
        classify(PermanentError("bad id"), TIMEOUT).error
        == "permanent error: PermanentError: bad id"
    )
    throttled = classify(ThrottledError("429", retry_after_s=7), TIMEOUT)
    assert throttled.retry_after == timedelta(seconds=7)
    assert classify(KeyError("x"), TIMEOUT).error == "unexpected error: KeyError: 'x'"


def test_unexpected_errors_get_fewer_attempts_than_named_ones() -> None:
    policy = RetryPolicy(base_s=1, cap_s=60, max_attempts_unknown=3)

    assert retry_limit(classify(KeyError("x"), TIMEOUT), 10, policy) == 3
    assert retry_limit(classify(KeyError("x"), TIMEOUT), 2, policy) == 2
    assert retry_limit(classify(TransientError("t"), TIMEOUT), 10, policy) == 10


def test_a_result_must_be_a_small_json_object() -> None:
    assert stored_result({"a": 1}, 100) == {"a": 1}
    assert stored_result(None, 100) is None
    with pytest.raises(PermanentError, match="not JSON"):
        stored_result({"a": object()}, 100)
    with pytest.raises(PermanentError, match="more than the 10"):
        stored_result({"a": "x" * 20}, 10)
    with pytest.raises(PermanentError, match="NUL"):
        stored_result({"a": "\x00"}, 100)


def _message(**overrides: object) -> JobMessage:
    job = make_job()
    values: dict[str, object] = {
        "job_id": job.id,
        "job_type": job.type,
        "queue": job.queue,
        "tenant_id": job.tenant_id,
    }
    values.update(overrides)
    return JobMessage(**values)  # type: ignore[arg-type]


def test_a_message_early_by_more_than_a_moment_goes_round_again() -> None:
    assert when_due(_message(), START) == (False, 0.0)
    assert when_due(_message(not_before=START + timedelta(seconds=2)), START) == (True, 0.0)
    again, wait = when_due(_message(not_before=START + timedelta(milliseconds=20)), START)
    assert not again
    assert wait == pytest.approx(0.02)
    assert when_due(_message(not_before=START - timedelta(seconds=5)), START) == (False, 0.0)


def test_an_unclaimed_message_is_refused_done_or_sent_round_again() -> None:
    job = make_job()
    message = JobMessage(job.id, job.type, job.queue, job.tenant_id)

    assert isinstance(unclaimed(message, None, START), Refuse)
    other = make_job(tenant_id="globex")
    other.id = job.id
    assert "tenant or type" in unclaimed(message, other, START).reason  # type: ignore[union-attr]

    job.start(START, timedelta(seconds=30))
    assert leased_elsewhere(message, job, START)
    route = unclaimed(message, job, START)
    assert route == ComeBack(START + timedelta(seconds=30))  # when that lease ends

    job.succeed(None, START)
    assert job.status is JobStatus.SUCCEEDED
    assert unclaimed(message, job, START) == Done()
    assert not leased_elsewhere(message, job, START)


def test_a_job_not_due_yet_is_looked_at_when_it_is_due() -> None:
    job = make_job(run_after=START + timedelta(minutes=5))
    message = JobMessage(job.id, job.type, job.queue, job.tenant_id)

    assert unclaimed(message, job, START) == ComeBack(START + timedelta(minutes=5))
    due = make_job()
    assert unclaimed(message, due, START) == ComeBack(START + timedelta(seconds=1))


def test_a_message_of_a_job_the_dispatcher_holds_is_dropped_and_the_job_not_started() -> None:
    job = make_job()
    job.hold()
    message = JobMessage(job.id, job.type, job.queue, job.tenant_id)

    assert not job.can_start(START)
    assert unclaimed(message, job, START) == Done()  # its release sends its own message
    with pytest.raises(IllegalTransitionError):
        job.start(START, timedelta(seconds=30))
    job.held_since = None  # released
    assert job.can_start(START)


def test_only_a_new_pending_job_is_held() -> None:
    job = make_job()
    job.start(START, timedelta(seconds=30))
    with pytest.raises(IllegalTransitionError):
        job.hold()
    later = make_job(run_after=START + timedelta(minutes=1))
    later.hold()
    assert later.rank_at == START + timedelta(minutes=1)  # in line by when it is due


class Held:
    """A hold of a running attempt, as the watchdog sees it: renewals answer from
    `answers` (True: held, False: gone, an exception: unconfirmed)."""

    def __init__(self, name: str, every_s: float, life_s: float, answers: list[object]) -> None:
        self.name = name
        self.renew_every_s = every_s
        self._life_s = life_s
        self._answers = answers
        self.renewals = 0
        loop = asyncio.get_running_loop()
        self._loop = loop
        self._until = loop.time() + life_s

    def left_s(self) -> float:
        return self._until - self._loop.time()

    async def renew(self) -> bool:
        self.renewals += 1
        answer = self._answers.pop(0) if self._answers else True
        if isinstance(answer, Exception):
            raise answer
        if answer:
            self._until = self._loop.time() + self._life_s
        return bool(answer)

    def taken(self) -> Exception:
        return LookupError(f"{self.name} taken")

    def lapsed(self, late_s: float) -> Exception:
        return TimeoutError(f"{self.name} lapsed")


async def test_one_watchdog_renews_every_hold_and_stops_the_attempt_when_one_is_gone() -> None:
    lease = Held("lease", 0.02, 1.0, [])
    lock = Held("lock", 0.05, 1.0, [True, False])  # gone at its second renewal

    with pytest.raises(LookupError, match="lock taken"):
        await Watchdog([lease, lock], "j1").run(lambda: asyncio.sleep(5))

    assert lock.renewals == 2
    assert lease.renewals >= 2  # renewed on its own cadence meanwhile


async def test_the_watchdog_stops_an_attempt_whose_renewals_are_not_confirmed_in_time() -> None:
    loop = asyncio.get_running_loop()
    lease = Held("lease", 0.02, 0.06, [OSError("database away")] * 100)
    began = loop.time()

    with pytest.raises(TimeoutError, match="lease lapsed"):
        await Watchdog([lease], "j1").run(lambda: asyncio.sleep(5))

    assert lease.renewals >= 2
    assert loop.time() - began < 1  # at its deadline, not at the attempt's end


async def test_an_attempt_that_ends_before_its_first_renewal_renews_nothing() -> None:
    lease = Held("lease", 0.05, 0.15, [])

    assert await Watchdog([lease], "j1").run(lambda: _value(7)) == 7
    await asyncio.sleep(0.1)  # past the renewal that would have been due

    assert lease.renewals == 0


async def test_a_cancellation_from_outside_the_watchdog_stays_a_cancellation() -> None:
    lease = Held("lease", 0.02, 0.06, [])
    attempt = asyncio.ensure_future(Watchdog([lease], "j1").run(lambda: asyncio.sleep(5)))
    await asyncio.sleep(0.05)
    attempt.cancel()

    with pytest.raises(asyncio.CancelledError):
        await attempt
    renewed = lease.renewals
    await asyncio.sleep(0.05)
    assert lease.renewals == renewed  # nothing renews after the attempt ended


async def test_the_watchdog_stops_an_attempt_at_its_time_limit_as_asyncio_timeout_would() -> None:
    loop = asyncio.get_running_loop()
    began = loop.time()

    with pytest.raises(TimeoutError):
        await Watchdog([], "j1", time_limit_s=0.05).run(lambda: asyncio.sleep(5))

    assert 0.04 <= loop.time() - began < 1
    assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]


async def test_an_attempt_within_its_time_limit_keeps_its_result_and_its_holds_renew() -> None:
    lease = Held("lease", 0.02, 1.0, [])

    assert await Watchdog([lease], "j1", time_limit_s=5).run(lambda: _after(0.07, 7)) == 7

    assert lease.renewals >= 2


async def test_a_hold_gone_before_the_time_limit_is_what_stops_the_attempt() -> None:
    lock = Held("lock", 0.02, 1.0, [False])

    with pytest.raises(LookupError, match="lock taken"):
        await Watchdog([lock], "j1", time_limit_s=5).run(lambda: asyncio.sleep(5))


async def test_an_attempt_that_ignores_its_stop_leaves_its_task_uncancelled() -> None:
    """A handler may swallow the cancellation and return: its result stands (as under
    asyncio.timeout), and its task is not left with a cancellation pending."""

    async def stubborn() -> int:
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.sleep(5)
        return 3

    assert await Watchdog([], "j1", time_limit_s=0.02).run(stubborn) == 3
    assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]


async def _value(value: int) -> int:
    return value


class SlowHeld(Held):
    """A hold whose renewal takes `renew_s` (a slow database)."""

    def __init__(self, renew_s: float) -> None:
        super().__init__("lease", 0.02, 1.0, [])
        self._renew_s = renew_s
        self.finished = 0

    async def renew(self) -> bool:
        held = await super().renew()
        await asyncio.sleep(self._renew_s)
        self.finished += 1
        return held


async def test_an_attempt_ends_only_once_its_renewal_under_way_has_ended() -> None:
    # A renewal still running after the attempt would use the database after its
    # caller is done with it: at shutdown, after the pool is closed.
    lease = SlowHeld(renew_s=0.1)

    assert await Watchdog([lease], "j1").run(lambda: _after(0.05, 7)) == 7

    assert lease.renewals == 1
    assert lease.finished == 1


async def test_a_cancelled_attempt_ends_only_once_its_renewal_under_way_has_ended() -> None:
    lease = SlowHeld(renew_s=0.1)
    attempt = asyncio.ensure_future(Watchdog([lease], "j1").run(lambda: asyncio.sleep(5)))
    await asyncio.sleep(0.05)  # its first renewal is under way
    attempt.cancel()

    with pytest.raises(asyncio.CancelledError):
        await attempt
    assert (lease.renewals, lease.finished) == (1, 1)


async def _after(delay_s: float, value: int) -> int:
    await asyncio.sleep(delay_s)
    return value


def _running(**overrides: Any) -> tuple[Job, JobMessage]:
    job = make_job(**overrides)
    job.start(START, timedelta(seconds=30))
    return job, JobMessage.of(job)


POLICY = RetryPolicy(base_s=1.0, cap_s=60.0, jitter=False)


def _conclude(job: Job, verdict: Verdict, message: JobMessage, **overrides: Any) -> list[Any]:
    values: dict[str, Any] = {
        "now": START,
        "policy": POLICY,
        "cancel_requested": False,
        "limits": JobLimits(),
        "delivery": message,
        "dead_letter_queue": "jobs.dlq",
    }
    values.update(overrides)
    return list(conclude(job, verdict, **values))


def test_a_retry_waits_the_policy_and_sends_the_next_attempts_message() -> None:
    job, message = _running()

    (again,) = _conclude(job, Verdict(Next.RETRY, "TransientError: later"), message)

    assert job.status is JobStatus.RETRYING
    assert job.last_error == "TransientError: later"
    assert job.run_after == START + timedelta(seconds=1)  # base * 2^(attempt 1 - 1)
    assert isinstance(again, JobMessage)
    assert (again.job_id, again.not_before) == (job.id, job.run_after)
    assert again.message_id != message.message_id


def test_the_last_attempt_fails_the_job_and_dead_letters_the_message_that_ran_it() -> None:
    job, message = _running(max_attempts=1)

    (letter,) = _conclude(job, Verdict(Next.RETRY, "TransientError: later"), message)

    assert job.status is JobStatus.FAILED
    assert job.last_error == "TransientError: later (gave up after 1 attempts)"
    assert isinstance(letter, DeadLetterMessage)
    assert letter.message.message_id == message.message_id
    assert (letter.reason, letter.dead_letter_queue) == (job.last_error, "jobs.dlq")
    assert letter.job_failed_at == job.finished_at == START


def test_unknown_errors_give_up_sooner_than_named_ones() -> None:
    job, message = _running(max_attempts=10)
    job.attempts = POLICY.max_attempts_unknown

    (letter,) = _conclude(job, Verdict(Next.RETRY, "boom", unknown=True), message)
    assert isinstance(letter, DeadLetterMessage)

    named, message = _running(max_attempts=10)
    named.attempts = POLICY.max_attempts_unknown
    (again,) = _conclude(named, Verdict(Next.RETRY, "TransientError: later"), message)
    assert isinstance(again, JobMessage)


def test_a_cancel_asked_for_while_it_ran_stops_a_job_that_would_run_again() -> None:
    for next_ in (Next.RETRY, Next.GIVE_BACK):
        job, message = _running()
        assert _conclude(job, Verdict(next_, "e"), message, cancel_requested=True) == []
        assert job.status is JobStatus.CANCELLED

    # Only a job that would run again asks: a failure is a failure.
    job, message = _running()
    (letter,) = _conclude(job, Verdict(Next.FAIL, "no"), message, cancel_requested=True)
    assert isinstance(letter, DeadLetterMessage)
    assert job.status is JobStatus.FAILED
    assert not Verdict(Next.FAIL).runs_again
    assert not Verdict(Next.THROTTLE).runs_again


def test_a_throttled_job_waits_what_it_was_told_with_its_limit_keys_and_no_attempt_spent() -> None:
    limits = JobLimits(
        limits=(TokenBucket(name="vendor", key="vendor:{tenant_id}", capacity=1, per_second=1),)
    )
    job, message = _running()

    (again,) = _conclude(
        job, Verdict(Next.THROTTLE, "429", retry_after=timedelta(seconds=7)), message, limits=limits
    )

    assert job.status is JobStatus.RETRYING
    assert job.attempts == 0  # given back
    assert isinstance(again, JobMessage)
    assert again.not_before == START + timedelta(seconds=7)
    assert again.limit_keys == ("vendor:acme",)


def test_an_attempt_given_back_runs_again_without_counting() -> None:
    job, message = _running()

    (again,) = _conclude(job, Verdict(Next.GIVE_BACK, "LeaseLostError: stalled"), message)

    assert (job.status, job.attempts) == (JobStatus.RETRYING, 0)
    assert isinstance(again, JobMessage)


def test_a_message_that_cannot_be_claimed_is_dead_lettered_acknowledged_or_sent_round() -> None:
    job = make_job()
    message = JobMessage.of(job)

    letter = sent_on(message, None, START, "jobs.dlq")
    assert isinstance(letter, DeadLetterMessage)
    assert letter.message.message_id == message.message_id
    assert letter.reason == f"job {job.id} does not exist"
    assert letter.dead_letter_queue == "jobs.dlq"

    job.start(START, timedelta(seconds=30))
    again = sent_on(message, job, START, "jobs.dlq")
    assert isinstance(again, JobMessage)
    assert again.not_before == START + timedelta(seconds=30)  # when that lease ends

    job.succeed(None, START)
    assert sent_on(message, job, START, "jobs.dlq") is None


class _Rows:
    """The job as another attempt keeps it, read by the waiting delivery."""

    def __init__(self, job: Job, clock: FixedClock) -> None:
        self.job: Job | None = job
        self.clock = clock
        self.reads = 0

    async def read(self) -> Job | None:
        self.reads += 1
        return self.job

    async def sleep(self, seconds: float) -> None:
        self.clock.advance(timedelta(seconds=seconds))


async def test_a_delivery_waits_out_a_dead_attempts_lease_then_takes_the_job_over() -> None:
    clock = FixedClock()
    job = make_job()
    job.start(START, timedelta(seconds=5))
    rows = _Rows(job, clock)

    until = START + HOLD_LEASES * timedelta(seconds=5)
    assert await wait_out_lease(job, until, rows.read, clock, rows.sleep) is None

    assert clock.now() == START + timedelta(seconds=5)  # at the lease's end, not before
    assert rows.reads == 5  # looked at it every TAKEOVER_POLL


async def test_a_lease_that_keeps_being_renewed_belongs_to_a_live_attempt() -> None:
    clock = FixedClock()
    job = make_job()
    job.start(START, timedelta(seconds=5))
    rows = _Rows(job, clock)

    async def renewing(seconds: float) -> None:
        await rows.sleep(seconds)
        job.lease_until = clock.now() + timedelta(seconds=5)

    until = START + timedelta(seconds=10)
    assert await wait_out_lease(job, until, rows.read, clock, renewing) is job
    assert clock.now() == until


async def test_waiting_ends_as_soon_as_the_other_attempt_has_ended() -> None:
    clock = FixedClock()
    job = make_job()
    job.start(START, timedelta(seconds=5))
    finished = make_job()
    finished.id = job.id
    finished.start(START, timedelta(seconds=5))
    finished.succeed(None, START)
    rows = _Rows(finished, clock)

    until = START + timedelta(seconds=10)
    assert await wait_out_lease(job, until, rows.read, clock, rows.sleep) is None
    assert rows.reads == 1


class Cancels:
    """A job's `cancel_requested` as `WatchedCancel` reads it: False until `cancel()`."""

    def __init__(self) -> None:
        self.asked = False
        self.reads = 0

    async def cancel_requested(self, job_id: object) -> bool:
        self.reads += 1
        return self.asked


async def test_a_cancel_seen_by_the_watch_stops_the_attempt_with_its_cleanup() -> None:
    store = Cancels()
    cleaned: list[str] = []

    async def handler() -> int:
        try:
            await asyncio.sleep(5)
        finally:
            cleaned.append("cleanup")
        return 1

    async def cancel_soon() -> None:
        await asyncio.sleep(0.05)
        store.asked = True

    asking = asyncio.ensure_future(cancel_soon())
    watch = WatchedCancel(store, JobId(uuid.uuid4()), every_s=0.02)  # type: ignore[arg-type]
    with pytest.raises(JobCancelledError):
        await Watchdog([watch], "j1", time_limit_s=5).run(handler)
    await asking

    assert cleaned == ["cleanup"]
    assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]


async def test_a_handler_that_swallows_its_cancel_still_ends_cancelled_not_succeeded() -> None:
    store = Cancels()
    store.asked = True

    async def stubborn() -> int:
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.sleep(5)
        return 3

    watch = WatchedCancel(store, JobId(uuid.uuid4()), every_s=0.02)  # type: ignore[arg-type]
    with pytest.raises(JobCancelledError):
        await Watchdog([watch], "j1").run(stubborn)
    assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]


async def test_a_short_attempt_never_reads_its_cancel() -> None:
    store = Cancels()

    assert (
        await Watchdog([WatchedCancel(store, JobId(uuid.uuid4()))], "j1").run(  # type: ignore[arg-type]
            lambda: _value(7)
        )
        == 7
    )

    assert store.reads == 0


class AwayCancels(Cancels):
    """The database is away: every read of `cancel_requested` fails, until it is back."""

    def __init__(self) -> None:
        super().__init__()
        self.away = True

    async def cancel_requested(self, job_id: object) -> bool:
        self.reads += 1
        if self.away:
            raise StoreUnavailableError("connection refused")
        return self.asked


async def test_a_cancel_watch_that_cannot_read_says_nothing_and_reads_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The lease's renewal already warns when the database is away: the watch, which reads
    # once a second per running job, must not add a warning a second for each.
    store = AwayCancels()

    async def handler() -> int:
        while store.reads < 3:
            await asyncio.sleep(0.01)
        store.away, store.asked = False, True
        await asyncio.sleep(5)
        return 1

    watch = WatchedCancel(store, JobId(uuid.uuid4()), every_s=0.02)  # type: ignore[arg-type]
    with caplog.at_level(logging.DEBUG), pytest.raises(JobCancelledError):
        await Watchdog([watch], "j1", time_limit_s=5).run(handler)

    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []
