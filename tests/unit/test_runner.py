import asyncio
import json
import time
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

import pytest

from jobrail.jobs.domain import Job, JobStatus
from jobrail.jobs.messages import JobMessage
from jobrail.jobs.retry import RetryPolicy
from jobrail.kernel.errors import PermanentError, TransientError
from jobrail.limits.counters import LimitCounters
from jobrail.limits.memory import MemoryLimits
from jobrail.limits.model import (
    Acquire,
    Concurrency,
    JobLimits,
    LimitsUnavailableError,
    Lock,
    TokenBucket,
)
from jobrail.transport.codec import HEADER_REASON, encode
from jobrail.worker.admission import LimitsAndLock
from jobrail.worker.context import JobContext
from jobrail.worker.gate import GateConfig, JobGate, Pass
from jobrail.worker.gating import job_owner
from jobrail.worker.runner import JobRun, JobRunner, RunnerConfig
from tests.fakes import START, FakeDispatcher, FakeJobStore, FakePublisher, FixedClock, make_job

TIMEOUT = timedelta(seconds=30)
GRACE = timedelta(seconds=10)


class Harness:
    def __init__(
        self,
        *,
        jitter: bool = False,
        unknown_limit: int = 2,
        lease: timedelta | None = None,
        store: FakeJobStore | None = None,
    ) -> None:
        self.clock = FixedClock()
        self.store = store or FakeJobStore()
        self.dispatcher = FakeDispatcher()
        self.publisher = FakePublisher()
        self.limits = MemoryLimits(clock_ms=lambda: self.clock.now().timestamp() * 1000)
        self.counters = LimitCounters()
        self.gate = JobGate(self.limits, self.counters, GateConfig(jitter=0.0))
        self.sleeps: list[float] = []
        self.runner = JobRunner(
            self.store,
            self.dispatcher,
            self.publisher,
            self.clock,
            RetryPolicy(base_s=1, cap_s=60, jitter=jitter, max_attempts_unknown=unknown_limit),
            RunnerConfig(
                dead_letter_queue="jobs.dlq",
                lease_grace=GRACE,
                store_retry_max=timedelta(milliseconds=1),
                lease=lease,
            ),
            [LimitsAndLock(self.gate, self.clock)],
            sleep=self.sleep,
        )
        self.calls = 0
        self.while_asleep: Any = None

    async def sleep(self, seconds: float) -> None:
        """The runner's waits pass on the fake clock (and let other tasks run)."""
        self.sleeps.append(seconds)
        self.clock.advance(timedelta(seconds=seconds))
        if self.while_asleep is not None:
            await self.while_asleep()
        await asyncio.sleep(0)

    def add(self, **overrides: Any) -> Job:
        job = make_job(**overrides)
        self.store.jobs[job.id] = job
        return job

    async def run(
        self,
        job: Job,
        handler: Any = None,
        timeout: timedelta = TIMEOUT,
        limits: JobLimits | None = None,
        deferrals: int = 0,
        prepaid: tuple[str, ...] = (),
        not_before: Any = None,
        limit_keys: tuple[str, ...] | None = None,
    ) -> Job:
        async def ok(payload: Mapping[str, Any], ctx: JobContext) -> dict[str, Any]:
            return {"echo": payload["message"]}

        async def counted(payload: Mapping[str, Any], ctx: JobContext) -> Any:
            self.calls += 1
            return await (handler or ok)(payload, ctx)

        delivery = JobMessage(
            job.id,
            job.type,
            job.queue,
            job.tenant_id,
            "m1",
            deferrals,
            not_before,
            prepaid,
            limit_keys=limit_keys,
        )
        await self.runner.run(delivery, JobRun(counted, timeout, limits or JobLimits()))
        return self.store.jobs.get(job.id, job)


def raising(error: BaseException) -> Any:
    async def handler(payload: Mapping[str, Any], ctx: JobContext) -> None:
        raise error

    return handler


async def test_a_job_runs_and_its_result_is_recorded() -> None:
    h = Harness()
    job = await h.run(h.add())

    assert job.status is JobStatus.SUCCEEDED
    assert job.result == {"echo": "hi"}
    assert job.attempts == 1
    assert h.dispatcher.dispatched == []


async def test_a_transient_error_schedules_a_retry_with_backoff() -> None:
    h = Harness()
    job = await h.run(h.add(), raising(TransientError("vendor timeout")))

    assert job.status is JobStatus.RETRYING
    assert job.last_error == "TransientError: vendor timeout"
    assert job.run_after == h.clock.now() + timedelta(seconds=1)
    [message] = h.dispatcher.dispatched
    assert message.queue == "jobs.default"
    assert message.not_before == job.run_after
    assert json.loads(message.body)["kwargs"]["job_id"] == str(job.id)


async def test_backoff_doubles_with_each_attempt() -> None:
    h = Harness()
    job = h.add(max_attempts=5)
    delays = []
    for _ in range(3):
        job = await h.run(job, raising(TransientError("again")))
        assert job.run_after is not None
        delays.append(job.run_after - h.clock.now())
        h.clock.current = job.run_after

    assert delays == [timedelta(seconds=1), timedelta(seconds=2), timedelta(seconds=4)]


async def test_a_job_type_with_its_own_retry_policy_backs_off_by_it() -> None:
    h = Harness()
    job = h.add(max_attempts=5)
    delays = []
    for _ in range(3):
        delivery = JobMessage(job.id, job.type, job.queue, job.tenant_id)
        own = JobRun(raising(TransientError("again")), TIMEOUT, retry_base_s=0.25, retry_cap_s=0.5)
        await h.runner.run(delivery, own)
        job = h.store.jobs[job.id]
        assert job.run_after is not None
        delays.append(job.run_after - h.clock.now())
        h.clock.current = job.run_after

    assert delays == [timedelta(seconds=0.25), timedelta(seconds=0.5), timedelta(seconds=0.5)]


async def test_a_permanent_error_fails_at_once_and_dead_letters() -> None:
    h = Harness()
    job = await h.run(h.add(), raising(PermanentError("account closed")))

    assert job.status is JobStatus.FAILED
    assert job.attempts == 1
    assert job.last_error == "permanent error: PermanentError: account closed"
    [dead] = h.dispatcher.dispatched
    assert dead.queue == "jobs.dlq"
    assert "account closed" in dead.headers[HEADER_REASON]


async def test_retries_end_in_failure_and_the_dead_letter_queue() -> None:
    h = Harness()
    job = h.add(max_attempts=2)
    job = await h.run(job, raising(TransientError("down")))
    h.clock.current = job.run_after  # type: ignore[assignment]
    job = await h.run(job, raising(TransientError("down")))

    assert job.status is JobStatus.FAILED
    assert "gave up after 2 attempts" in (job.last_error or "")
    assert [m.queue for m in h.dispatcher.dispatched] == ["jobs.default", "jobs.dlq"]


async def test_unknown_errors_get_fewer_attempts_than_transient_ones() -> None:
    h = Harness(unknown_limit=2)
    job = h.add(max_attempts=5)
    job = await h.run(job, raising(KeyError("bug")))
    assert job.status is JobStatus.RETRYING
    h.clock.current = job.run_after  # type: ignore[assignment]
    job = await h.run(job, raising(KeyError("bug")))

    assert job.status is JobStatus.FAILED
    assert job.attempts == 2
    assert "unexpected error: KeyError" in (job.last_error or "")


async def test_a_handler_that_overruns_its_timeout_is_retried() -> None:
    h = Harness()

    async def slow(payload: Mapping[str, Any], ctx: JobContext) -> None:
        await asyncio.sleep(10)

    job = await h.run(h.add(), slow, timeout=timedelta(milliseconds=20))

    assert job.status is JobStatus.RETRYING
    assert job.last_error == "timed out after 0.02s"


async def test_a_result_that_is_not_json_fails_the_job() -> None:
    h = Harness()

    async def odd(payload: Mapping[str, Any], ctx: JobContext) -> dict[str, Any]:
        return {"when": object()}

    job = await h.run(h.add(), odd)

    assert job.status is JobStatus.FAILED
    assert "not JSON" in (job.last_error or "")


@pytest.mark.parametrize("status", ["succeeded", "cancelled"])
async def test_a_message_for_a_finished_job_does_nothing(status: str) -> None:
    h = Harness()
    job = h.add()
    if status == "succeeded":
        await h.run(job)
    else:
        job.cancel(h.clock.now())
    finished_at = h.store.jobs[job.id].finished_at

    again = await h.run(job)

    assert h.calls == (1 if status == "succeeded" else 0)
    assert again.status.value == status
    assert again.finished_at == finished_at
    assert h.publisher.published == []


async def test_a_message_for_a_job_that_does_not_exist_is_dead_lettered() -> None:
    h = Harness()
    ghost = make_job()

    await h.run(ghost)

    [dead] = h.publisher.published
    assert dead.queue == "jobs.dlq"
    assert "does not exist" in dead.headers[HEADER_REASON]
    assert h.calls == 0


@pytest.mark.parametrize("forged", ["tenant", "type"])
async def test_a_message_naming_another_tenants_job_never_runs_it(forged: str) -> None:
    h = Harness()
    job = h.add(tenant_id="acme")
    delivery = JobMessage(
        job.id,
        "other.type" if forged == "type" else job.type,
        job.queue,
        "globex" if forged == "tenant" else job.tenant_id,
        "forged-1",
    )

    async def never(payload: Mapping[str, Any], ctx: JobContext) -> None:
        raise AssertionError("the side effect ran")

    await h.runner.run(delivery, JobRun(never, TIMEOUT, JobLimits()))

    [dead] = h.publisher.published
    assert dead.queue == "jobs.dlq"
    assert "does not match job" in dead.headers[HEADER_REASON]
    untouched = h.store.jobs[job.id]
    assert (untouched.status, untouched.attempts) == (JobStatus.PENDING, 0)


# A limit whose key names a field the jobs of make_job do not have.
PER_ACCOUNT = JobLimits(lock=Lock(key="account:{account_id}", ttl_s=3))


async def test_a_message_of_a_limited_type_naming_a_job_of_another_type_is_dead_lettered(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Its keys would be made from the other type's payload: a KeyError, logged as an
    # unexpected error and sent round again, for ever.
    h = Harness()
    job = h.add(tenant_id="acme")
    delivery = JobMessage(job.id, "sync.account", job.queue, job.tenant_id, "forged-2")

    async def never(payload: Mapping[str, Any], ctx: JobContext) -> None:
        raise AssertionError("the side effect ran")

    await h.runner.run(delivery, JobRun(never, TIMEOUT, PER_ACCOUNT))

    [dead] = h.publisher.published
    assert dead.queue == "jobs.dlq"
    assert "does not match job" in dead.headers[HEADER_REASON]
    untouched = h.store.jobs[job.id]
    assert (untouched.status, untouched.attempts) == (JobStatus.PENDING, 0)
    assert not [r for r in caplog.records if r.levelname == "ERROR"]


async def test_a_job_whose_payload_cannot_make_its_limit_keys_fails_without_running(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # A row written past the API (the enqueue checks the payload): no attempt would
    # ever get its keys.
    h = Harness()
    job = h.add()

    async def never(payload: Mapping[str, Any], ctx: JobContext) -> None:
        raise AssertionError("the side effect ran")

    delivery = JobMessage(job.id, job.type, job.queue, job.tenant_id, "m-keys")
    await h.runner.run(delivery, JobRun(never, TIMEOUT, PER_ACCOUNT))

    failed = h.store.jobs[job.id]
    assert failed.status is JobStatus.FAILED
    assert "limits' keys cannot be made from its payload" in (failed.last_error or "")
    [dead] = h.dispatcher.dispatched
    assert dead.queue == "jobs.dlq"
    assert not [r for r in caplog.records if r.levelname == "ERROR"]


async def test_an_early_message_is_deferred_to_the_jobs_due_time() -> None:
    h = Harness()
    due = h.clock.now() + timedelta(minutes=2)
    job = h.add(run_after=due)

    await h.run(job)

    assert h.calls == 0
    [again] = h.publisher.published
    assert again.not_before == due
    assert h.store.jobs[job.id].status is JobStatus.PENDING


# -- a delivery whose job another attempt holds ---------------------------------------

LEASE = timedelta(seconds=6)


async def test_a_message_for_a_job_running_elsewhere_is_held_until_that_attempt_ends() -> None:
    h = Harness(lease=LEASE)
    job = h.add()
    running = h.store.jobs[job.id]
    running.start(h.clock.now(), LEASE)

    async def finish() -> None:
        if running.status is JobStatus.RUNNING:
            running.succeed({"by": "the other worker"}, h.clock.now())

    h.while_asleep = finish
    done = await h.run(job)

    assert h.calls == 0
    assert h.publisher.published == []  # acknowledged, not sent round the queue again
    assert done.result == {"by": "the other worker"}
    assert sum(h.sleeps) <= 1  # let go at its first look after the attempt ended


async def test_a_dead_workers_job_is_taken_over_when_its_lease_ends_keeping_its_place() -> None:
    h = Harness(lease=LEASE)
    job = h.add()
    h.store.jobs[job.id].start(h.clock.now(), LEASE)  # then its worker died
    redelivered_at = h.clock.now()

    done = await h.run(job)

    assert done.status is JobStatus.SUCCEEDED
    assert done.attempts == 2
    assert done.started_at == redelivered_at + LEASE  # the moment the dead claim ended
    assert h.publisher.published == []  # it never went to the back of the queue


async def test_a_job_whose_live_attempt_keeps_renewing_is_sent_round_after_two_leases() -> None:
    h = Harness(lease=LEASE)
    job = h.add()
    running = h.store.jobs[job.id]
    running.start(h.clock.now(), LEASE)
    held_at = h.clock.now()

    async def renew() -> None:
        running.lease_until = h.clock.now() + LEASE

    h.while_asleep = renew
    done = await h.run(job)

    assert h.calls == 0
    assert done.status is JobStatus.RUNNING
    assert done.attempts == 1
    assert h.clock.now() == held_at + 2 * LEASE
    [again] = h.publisher.published
    assert again.not_before == running.lease_until  # back when that lease would end


async def test_a_held_message_holds_none_of_its_jobs_limits_while_it_waits() -> None:
    h = Harness(lease=LEASE)
    job = h.add()
    h.store.jobs[job.id].start(h.clock.now(), LEASE)
    others: list[Job] = []

    keys = tuple(ACCOUNT_LOCK.keys({**job.payload, "tenant_id": job.tenant_id}))

    async def another_job_on_the_same_account() -> None:
        if not others:
            others.append(await h.run(h.add(), limits=ACCOUNT_LOCK, limit_keys=keys))

    h.while_asleep = another_job_on_the_same_account
    done = await h.run(job, limits=ACCOUNT_LOCK, limit_keys=keys)

    assert others[0].status is JobStatus.SUCCEEDED  # the lock was free while it waited
    assert h.counters.lock_contention == 0
    assert done.status is JobStatus.SUCCEEDED
    assert done.attempts == 2


async def test_a_job_whose_worker_died_is_taken_over_after_its_lease() -> None:
    h = Harness()
    job = h.add()
    h.store.jobs[job.id].start(h.clock.now(), TIMEOUT + GRACE)
    h.clock.advance(TIMEOUT + GRACE)

    job = await h.run(job)

    assert job.status is JobStatus.SUCCEEDED
    assert job.attempts == 2


async def test_an_outcome_from_an_attempt_that_was_taken_over_is_discarded() -> None:
    h = Harness()
    job = h.add()

    async def overtaken(payload: Mapping[str, Any], ctx: JobContext) -> dict[str, str]:
        h.clock.advance(TIMEOUT + GRACE)
        h.store.jobs[job.id].start(h.clock.now(), TIMEOUT + GRACE)  # another worker
        return {"late": "yes"}

    result = await h.run(job, overtaken)

    assert result.status is JobStatus.RUNNING
    assert result.attempts == 2
    assert result.result is None


async def test_cancel_requested_is_honoured_at_a_checkpoint() -> None:
    h = Harness()
    job = h.add()

    async def cooperative(payload: Mapping[str, Any], ctx: JobContext) -> None:
        h.store.jobs[job.id].cancel(h.clock.now())
        await ctx.checkpoint()
        raise AssertionError("should have stopped at the checkpoint")

    result = await h.run(job, cooperative)

    assert result.status is JobStatus.CANCELLED
    assert result.finished_at is not None


async def test_a_failed_attempt_of_a_cancelled_job_is_not_retried() -> None:
    h = Harness()
    job = h.add()

    async def failing_after_cancel(payload: Mapping[str, Any], ctx: JobContext) -> None:
        h.store.jobs[job.id].cancel(h.clock.now())
        raise TransientError("down")

    result = await h.run(job, failing_after_cancel)

    assert result.status is JobStatus.CANCELLED
    assert h.dispatcher.dispatched == []


async def test_the_runner_waits_out_a_database_outage_instead_of_losing_the_job() -> None:
    h = Harness()
    job = h.add()
    h.store.unavailable_for = 3

    result = await h.run(job)

    assert result.status is JobStatus.SUCCEEDED
    assert h.store.calls == 5  # 3 failures, then claim and record


async def test_a_deferral_waits_out_a_broker_outage() -> None:
    h = Harness()
    job = h.add(run_after=h.clock.now() + timedelta(minutes=1))
    h.publisher.unavailable_for = 2

    await h.run(job)

    assert len(h.publisher.published) == 1


ONE_PER_MINUTE = JobLimits(
    limits=[TokenBucket("vendor", key="vendor:{tenant_id}", capacity=1, per_second=1 / 60)]
)
ACCOUNT_LOCK = JobLimits(lock=Lock(key="account:{message}", ttl_s=3))


async def test_a_job_over_its_rate_limit_is_deferred_without_spending_an_attempt() -> None:
    h = Harness()
    await h.run(h.add(), limits=ONE_PER_MINUTE)
    second = h.add()

    job = await h.run(second, limits=ONE_PER_MINUTE)

    assert job.status is JobStatus.PENDING
    assert job.attempts == 0
    [deferred] = h.publisher.published
    assert deferred.not_before == h.clock.now() + timedelta(seconds=60)
    labels = json.loads(deferred.body)["labels"]
    assert labels["deferrals"] == 1
    # Its token is reserved for it, in the bucket state (epoch) it was reserved in.
    assert [label.split(":", 1)[1] for label in labels["prepaid"]] == ["vendor:acme"]
    assert h.counters.deferred == 1
    assert h.counters.admitted == 1


async def test_a_deferred_job_runs_once_the_limit_allows() -> None:
    h = Harness()
    await h.run(h.add(), limits=ONE_PER_MINUTE)
    second = h.add()
    await h.run(second, limits=ONE_PER_MINUTE)
    reserved = json.loads(h.publisher.published[-1].body)["labels"]["prepaid"]
    h.clock.advance(timedelta(seconds=60))
    third = h.add()

    job = await h.run(
        second,
        limits=ONE_PER_MINUTE,
        deferrals=1,
        prepaid=tuple(reserved),
        not_before=h.clock.now(),
    )
    await h.run(third, limits=ONE_PER_MINUTE)

    assert job.status is JobStatus.SUCCEEDED
    assert job.attempts == 1
    # The third came after the second had reserved the token: it waits its turn.
    assert h.store.jobs[third.id].status is JobStatus.PENDING
    assert h.publisher.published[-1].not_before == h.clock.now() + timedelta(seconds=60)


async def test_a_message_back_early_from_a_delay_tier_goes_round_again_untouched() -> None:
    h = Harness()
    job = h.add()
    due = h.clock.now() + timedelta(seconds=3)

    await h.run(job, limits=ONE_PER_MINUTE, not_before=due)

    assert h.calls == 0
    assert h.store.calls == 0
    assert h.counters.admitted == h.counters.deferred == 0
    [again] = h.publisher.published
    assert again.not_before == due


async def test_the_handler_gets_the_fence_and_the_lock_is_released_after() -> None:
    h = Harness()
    fences: list[int | None] = []

    async def fenced(payload: Mapping[str, Any], ctx: JobContext) -> None:
        fences.append(ctx.fence)

    await h.run(h.add(), fenced, limits=ACCOUNT_LOCK)
    await h.run(h.add(), fenced, limits=ACCOUNT_LOCK)

    assert len(fences) == 2
    assert fences[0] is not None
    assert fences[1] is not None
    assert fences[1] > fences[0]
    assert h.counters.lock_contention == 0


async def test_a_token_taken_for_a_job_another_worker_claimed_first_is_given_back() -> None:
    h = Harness()
    job = h.add()
    claim = h.store.claim

    async def raced(job_id: Any, now: Any, lease: Any) -> Any:
        await claim(job_id, now, lease)  # another worker wins between our look and our claim
        return await claim(job_id, now, lease)

    h.store.claim = raced  # type: ignore[method-assign]
    await h.run(job, limits=ONE_PER_MINUTE)

    assert h.calls == 0
    peek = await h.limits.peek(Acquire(ONE_PER_MINUTE.limits[0], "vendor:acme"))
    assert peek.allowed  # the token was refunded


async def test_a_job_whose_claim_outlasts_its_token_waits_its_turn_instead_of_starting() -> None:
    """The bucket's first token leaves no room: a job that reaches its handler a second
    after the bucket let it in would start on a token whose time has gone."""
    h = Harness()
    job = h.add()
    claim = h.store.claim

    async def stalled(*args: Any, **kwargs: Any) -> Any:
        h.clock.advance(timedelta(seconds=1))  # the database answers a second later
        return await claim(*args, **kwargs)

    h.store.claim = stalled  # type: ignore[method-assign]
    waiting = await h.run(job, limits=ONE_PER_MINUTE)

    assert h.calls == 0
    assert waiting.status is JobStatus.RETRYING
    assert waiting.attempts == 0
    [again] = h.dispatcher.dispatched
    # Admitted again at its real start, it waits for the bucket's next token.
    assert again.not_before == h.clock.now() + timedelta(seconds=59)
    assert json.loads(again.body)["labels"]["prepaid"]  # its new token, reserved


async def test_when_redis_is_down_a_limited_job_is_deferred_with_backoff_not_run() -> None:
    h = Harness()

    async def down(*args: Any, **kwargs: Any) -> Any:
        raise LimitsUnavailableError("connection refused")

    h.limits.admit = down  # type: ignore[method-assign]
    job = await h.run(h.add(), limits=ACCOUNT_LOCK, deferrals=3)

    assert h.calls == 0
    assert job.attempts == 0
    [deferred] = h.publisher.published
    # Its earlier deferrals were not outages: the backoff starts at its first step.
    assert deferred.not_before == h.clock.now() + timedelta(seconds=0.5)
    assert h.counters.unavailable == 1


async def test_a_job_without_limits_runs_while_redis_is_down() -> None:
    h = Harness()

    async def down(*args: Any, **kwargs: Any) -> Any:
        raise LimitsUnavailableError("connection refused")

    h.limits.admit = down  # type: ignore[method-assign]

    assert (await h.run(h.add())).status is JobStatus.SUCCEEDED


async def test_losing_the_lock_stops_the_attempt_and_retries_the_job() -> None:
    h = Harness()
    lock = JobLimits(lock=Lock(key="account:{message}", ttl_s=0.06))

    async def slow(payload: Mapping[str, Any], ctx: JobContext) -> None:
        await h.limits.reset(Acquire(lock.lock, "account:hi"))  # type: ignore[arg-type]
        await asyncio.sleep(5)

    job = await h.run(h.add(), slow, limits=lock)

    assert job.status is JobStatus.RETRYING
    assert "lock was lost" in (job.last_error or "")
    assert h.counters.lock_lost == 1


async def test_a_job_back_too_late_for_its_reserved_token_competes_again() -> None:
    h = Harness()
    await h.run(h.add(), limits=ONE_PER_MINUTE)
    late = h.add()
    due = h.clock.now()
    h.clock.advance(timedelta(seconds=1))  # far past the reservation grace

    job = await h.run(late, limits=ONE_PER_MINUTE, prepaid=("vendor:acme",), not_before=due)

    assert job.status is JobStatus.PENDING
    assert h.calls == 1


async def test_a_message_carrying_its_limit_keys_is_gated_without_reading_the_job() -> None:
    h = Harness()
    job = h.add()
    delivery = JobMessage(
        job.id, job.type, job.queue, job.tenant_id, "m1", limit_keys=("vendor:acme",)
    )

    async def ok(payload: Mapping[str, Any], ctx: JobContext) -> None:
        return None

    await h.runner.run(delivery, JobRun(ok, TIMEOUT, ONE_PER_MINUTE))

    assert h.store.jobs[job.id].status is JobStatus.SUCCEEDED
    assert h.store.calls == 2  # claim and record: no look at the job first
    assert h.counters.admitted == 1


def test_enqueued_messages_carry_their_limit_keys() -> None:
    from pydantic import BaseModel

    from jobrail.jobs.enqueue import message_for
    from jobrail.jobs.registry import JobRegistry, job

    class Account(BaseModel):
        account_id: str

    @job("t.sync", payload=Account, lock=Lock(key="account:{tenant_id}:{account_id}"))
    async def sync(payload: Account, ctx: JobContext) -> None:
        return None

    registry = JobRegistry([sync], queues=["jobs.default"], default_timeout_s=5)
    message = message_for(
        make_job(type="t.sync", payload={"account_id": "a7"}), registry.get("t.sync")
    )

    assert json.loads(encode(message).body)["labels"]["limit_keys"] == ["account:acme:a7"]


def test_a_deferred_message_carries_its_trace_context_on() -> None:
    from tests.support.wire import parse_job_message

    parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    job = make_job()
    delivery = JobMessage(
        job.id, job.type, job.queue, job.tenant_id, "m1", trace_context={"traceparent": parent}
    )

    again = delivery.again(deferred=True)

    labels = parse_job_message(encode(again).body).labels
    assert labels["traceparent"] == parent
    assert labels["deferrals"] == 1


# -- leases of long jobs ---------------------------------------------------------------

RENEWED = timedelta(milliseconds=300)  # renewed every 100 ms


async def test_a_long_job_holds_a_short_lease_renewed_while_it_runs() -> None:
    h = Harness(lease=RENEWED)
    job = h.add()
    leases = []

    async def slow(payload: Mapping[str, Any], ctx: JobContext) -> None:
        leases.append(h.store.jobs[job.id].lease_until)
        for _ in range(6):
            h.clock.advance(timedelta(seconds=1))
            await asyncio.sleep(0.1)
            leases.append(h.store.jobs[job.id].lease_until)

    done = await h.run(job, slow, timeout=timedelta(minutes=5))

    assert done.status is JobStatus.SUCCEEDED
    assert done.started_at is not None
    # Claimed for 300 ms, not 5 min + grace; renewals move the end on, each time to
    # 300 ms past the clock of the moment (it went on 1 s per 100 ms here).
    assert leases[0] == done.started_at + RENEWED
    assert len(set(leases)) >= 3
    assert {(lease - START) % timedelta(seconds=1) for lease in leases if lease} == {RENEWED}


async def test_a_job_shorter_than_the_lease_claims_timeout_plus_grace_and_never_renews() -> None:
    h = Harness(lease=timedelta(minutes=5))
    job = h.add()
    seen = []

    async def look(payload: Mapping[str, Any], ctx: JobContext) -> None:
        await asyncio.sleep(0.05)
        seen.append(h.store.jobs[job.id].lease_until)

    await h.run(job, look)
    calls_after_claim = h.store.calls

    assert seen == [h.clock.now() + TIMEOUT + GRACE]
    assert calls_after_claim == 2  # the claim and the record


async def test_an_attempt_whose_claim_was_taken_over_is_stopped() -> None:
    h = Harness(lease=RENEWED)
    job = h.add()
    finished = []

    async def slow(payload: Mapping[str, Any], ctx: JobContext) -> None:
        # Another worker takes the job over (its lease looked ended to it).
        h.store.jobs[job.id].started_at = h.clock.now() + timedelta(seconds=1)
        await asyncio.sleep(1)
        finished.append(True)

    await h.run(job, slow, timeout=timedelta(minutes=5))

    assert finished == []  # stopped at the first renewal, long before its second
    assert h.store.jobs[job.id].status is JobStatus.RUNNING  # the new claim's, untouched
    assert h.dispatcher.dispatched == []


async def test_an_attempt_that_cannot_renew_for_a_whole_lease_stops_and_retries() -> None:
    h = Harness(lease=RENEWED)
    job = h.add()

    async def slow(payload: Mapping[str, Any], ctx: JobContext) -> None:
        h.store.unavailable_for = 1_000  # the database goes away
        await asyncio.sleep(2)

    async def back() -> None:
        await asyncio.sleep(0.6)
        h.store.unavailable_for = 0

    restore = asyncio.create_task(back())
    done = await h.run(job, slow, timeout=timedelta(minutes=5))
    await restore

    assert done.status is JobStatus.RETRYING
    assert done.last_error == UNCONFIRMED
    assert done.attempts == 0  # the database's outage, not the job's: not counted


UNCONFIRMED = "LeaseLostError: the database did not confirm the job's claim in time"


class HangingRenewals(FakeJobStore):
    """A database that stops answering renewals (a stalled connection), and nothing else."""

    async def extend_lease(self, job_id: Any, claim: Any, until: Any) -> bool:
        await asyncio.Event().wait()
        raise AssertionError("unreachable")


async def test_an_attempt_whose_renewal_hangs_stops_before_its_lease_ends() -> None:
    h = Harness(lease=RENEWED, store=HangingRenewals())
    job = h.add()
    stopped_after: list[float] = []
    loop = asyncio.get_running_loop()

    async def slow(payload: Mapping[str, Any], ctx: JobContext) -> None:
        began = loop.time()
        try:
            await asyncio.sleep(2)
        finally:
            stopped_after.append(loop.time() - began)

    done = await h.run(job, slow, timeout=timedelta(minutes=5))

    assert done.status is JobStatus.RETRYING
    assert done.last_error == UNCONFIRMED
    # Stopped a margin before its 300 ms lease ended, when another worker may claim it.
    assert stopped_after[0] < RENEWED.total_seconds()


async def test_a_database_stall_on_a_jobs_last_attempt_does_not_fail_it() -> None:
    h = Harness(lease=RENEWED, store=HangingRenewals())
    job = h.add(max_attempts=1)

    async def slow(payload: Mapping[str, Any], ctx: JobContext) -> None:
        await asyncio.sleep(2)

    done = await h.run(job, slow, timeout=timedelta(minutes=5))

    assert done.status is JobStatus.RETRYING
    assert done.attempts == 0
    [again] = h.dispatcher.dispatched  # its next attempt, no dead letter
    assert again.queue == "jobs.default"
    assert again.not_before == done.run_after


async def test_a_handler_that_blocks_the_event_loop_past_its_lease_spends_its_attempt() -> None:
    h = Harness(lease=RENEWED, store=HangingRenewals())
    job = h.add(max_attempts=1)

    async def blocking(payload: Mapping[str, Any], ctx: JobContext) -> None:
        time.sleep(0.6)  # blocks the event loop: what the test is about
        await asyncio.sleep(2)

    done = await h.run(job, blocking, timeout=timedelta(minutes=5))

    # Stopped late, after its lease ended: not the database's fault, and retrying for
    # ever would not help.
    assert done.status is JobStatus.FAILED
    assert done.last_error is not None
    assert "claim lapsed" in done.last_error
    assert "gave up after 1 attempts" in done.last_error


# -- a dead worker's job that holds a lock -----------------------------------------------

# A lock that outlives the job's lease, as sync.account's 30 s lock outlives the 6 s lease.
LONG_LOCK = JobLimits(
    limits=[Concurrency("slots", key="pool:{tenant_id}", slots=1, lease_s=30)],
    lock=Lock(key="account:{message}", ttl_s=30),
)


def _keys(job: Job, limits: JobLimits) -> tuple[str, ...]:
    return tuple(limits.keys({**job.payload, "tenant_id": job.tenant_id}))


async def _dead_attempt(h: Harness, job: Job, limits: JobLimits) -> Any:
    """What a worker killed mid-job leaves: its lock and slot, and the job claimed."""
    held = await h.gate.enter(limits, _keys(job, limits), owner=job_owner(job.id))
    assert isinstance(held, Pass)
    h.store.jobs[job.id].start(h.clock.now(), LEASE)
    return held


async def test_a_dead_workers_locked_job_is_taken_over_when_its_lease_ends() -> None:
    h = Harness(lease=LEASE)
    job = h.add()
    dead = await _dead_attempt(h, job, LONG_LOCK)
    redelivered_at = h.clock.now()
    fences: list[int | None] = []

    async def fenced(payload: Mapping[str, Any], ctx: JobContext) -> None:
        fences.append(ctx.fence)

    done = await h.run(job, fenced, limits=LONG_LOCK, limit_keys=_keys(job, LONG_LOCK))

    assert done.status is JobStatus.SUCCEEDED
    assert done.attempts == 2
    # Not after the lock's 30 s TTL: when the dead claim's lease ended, in its place.
    assert done.started_at == redelivered_at + LEASE
    assert h.publisher.published == []
    assert fences[0] is not None
    assert fences[0] > dead.fence
    assert done.attempts == 2
    assert h.counters.lock_lost == 0
    lock = Acquire(LONG_LOCK.lock, _keys(job, LONG_LOCK)[1])  # type: ignore[arg-type]
    assert await h.limits.holders(lock) == []  # released after the new attempt


async def test_a_live_attempts_lock_is_never_taken_by_a_redelivery() -> None:
    h = Harness(lease=LEASE)
    job = h.add()
    live = await _dead_attempt(h, job, LONG_LOCK)
    running = h.store.jobs[job.id]

    async def renew() -> None:  # the attempt is alive: it renews its lease and its lock
        running.lease_until = h.clock.now() + LEASE
        assert await h.limits.extend(live._grant)

    h.while_asleep = renew
    done = await h.run(job, limits=LONG_LOCK, limit_keys=_keys(job, LONG_LOCK))

    assert h.calls == 0
    assert done.status is JobStatus.RUNNING
    assert done.attempts == 1
    [again] = h.publisher.published  # held for two leases, then sent round to its end
    assert again.not_before == running.lease_until
    assert await h.limits.extend(live._grant)  # still holds its lock and slot


async def test_a_job_turned_away_after_its_takeover_claim_gets_its_attempt_back() -> None:
    h = Harness(lease=LEASE)
    limits = JobLimits(
        limits=[TokenBucket("vendor", key="vendor:{tenant_id}", capacity=1, per_second=1)],
        lock=Lock(key="account:{message}", ttl_s=30),
    )
    job = h.add()
    await _dead_attempt(h, job, JobLimits(lock=limits.lock))
    h.clock.advance(LEASE)
    claim = h.store.claim

    async def claim_while_another_job_takes_the_token(*args: Any) -> Any:
        bucket = Acquire(limits.limits[0], "vendor:acme")
        assert (await h.limits.admit([bucket], "another-job")).allowed
        return await claim(*args)

    h.store.claim = claim_while_another_job_takes_the_token  # type: ignore[method-assign]
    done = await h.run(job, limits=limits, limit_keys=_keys(job, limits))

    assert h.calls == 0
    assert done.status is JobStatus.RETRYING
    assert done.attempts == 1  # the dead attempt's; this one was given back
    [deferred] = h.dispatcher.dispatched
    assert deferred.not_before == done.run_after
    assert done.run_after is not None
    assert done.run_after > h.clock.now()
