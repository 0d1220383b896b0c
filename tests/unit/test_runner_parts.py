"""The runner's parts on their own: the backoff, the error classification, the retry
decision's limits, where a message goes that cannot run now, and the watchdog."""

import asyncio
from datetime import timedelta

import pytest

from jobrail.jobs.context import JobCancelledError
from jobrail.jobs.domain import JobStatus
from jobrail.jobs.messages import JobMessage
from jobrail.jobs.outcomes import Next, classify, retry_limit, stored_result
from jobrail.jobs.ports import BrokerUnavailableError, StoreUnavailableError
from jobrail.jobs.registry import JobSpec
from jobrail.jobs.rerouting import ComeBack, Done, Refuse, leased_elsewhere, unclaimed, when_due
from jobrail.jobs.retry import RetryPolicy, backoff
from jobrail.jobs.watchdog import LeaseLostError, Watchdog
from jobrail.kernel.errors import PermanentError, ThrottledError, TransientError
from jobrail.limits.model import LimitsUnavailableError
from tests.fakes import START, make_job

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
