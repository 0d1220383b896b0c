"""The job gate's waits: the Redis-outage backoff and the reservations a job carries.

A fake clock drives the runner; each deferral's message is delivered again as the next
delivery, labels and all, as RabbitMQ would bring it back.
"""

import json
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from jobrail.jobs.domain import Job, JobStatus
from jobrail.jobs.messages import JobMessage
from jobrail.jobs.retry import RetryPolicy
from jobrail.kernel.ids import JobId
from jobrail.limits.counters import LimitCounters
from jobrail.limits.memory import MemoryLimits
from jobrail.limits.model import (
    Acquire,
    Admission,
    JobLimits,
    LimitsUnavailableError,
    TokenBucket,
)
from jobrail.transport.codec import Envelope, MalformedMessageError, encode
from jobrail.worker.admission import LimitsAndLock
from jobrail.worker.context import JobContext
from jobrail.worker.gate import GateConfig, JobGate, reservation, reservations
from jobrail.worker.gating import Deferred
from jobrail.worker.runner import JobRun, JobRunner, RunnerConfig
from tests.fakes import FakeDispatcher, FakeJobStore, FakePublisher, FixedClock, make_job
from tests.support.wire import parse_job_message

ONE_PER_MINUTE = JobLimits(
    limits=[TokenBucket("vendor", key="vendor:{tenant_id}", capacity=1, per_second=1 / 60)]
)


class FlakyLimits(MemoryLimits):
    """The memory backend, unreachable while `down` (as Redis is when it is stopped)."""

    def __init__(self, clock: FixedClock) -> None:
        super().__init__(clock_ms=lambda: clock.now().timestamp() * 1000)
        self.down = False

    async def admit(
        self,
        items: Sequence[Acquire],
        holder: str,
        *,
        reserve: bool = False,
        now_ms: float | None = None,
        owner: str = "",
        take_over: bool = False,
    ) -> Admission:
        if self.down:
            raise LimitsUnavailableError("connection refused")
        return await super().admit(
            items, holder, reserve=reserve, now_ms=now_ms, owner=owner, take_over=take_over
        )


class Worker:
    def __init__(self) -> None:
        self.clock = FixedClock()
        self.store = FakeJobStore()
        self.publisher = FakePublisher()
        self.limits = FlakyLimits(self.clock)
        self.gate = JobGate(self.limits, LimitCounters(), GateConfig(jitter=0.0))
        self.runner = JobRunner(
            self.store,
            FakeDispatcher(),
            self.publisher,
            self.clock,
            RetryPolicy(base_s=1, cap_s=60, jitter=False, max_attempts_unknown=2),
            RunnerConfig(
                dead_letter_queue="jobs.dlq",
                lease_grace=timedelta(seconds=10),
                store_retry_max=timedelta(milliseconds=1),
            ),
            [LimitsAndLock(self.gate, self.clock)],
        )

    def add(self) -> Job:
        job = make_job()
        self.store.jobs[job.id] = job
        return job

    async def deliver(self, delivery: JobMessage) -> Envelope | None:
        """Run one delivery; return the message it was deferred with, if it was."""
        published = len(self.publisher.published)

        async def handler(payload: Mapping[str, Any], ctx: JobContext) -> None:
            return None

        await self.runner.run(delivery, JobRun(handler, timedelta(seconds=30), ONE_PER_MINUTE))
        new = self.publisher.published[published:]
        return new[-1] if new else None

    def wait(self, message: Envelope) -> timedelta:
        assert message.not_before is not None
        return message.not_before - self.clock.now()

    def when_due(self, message: Envelope) -> JobMessage:
        """The message, back from its delay tier when due."""
        assert message.not_before is not None
        self.clock.advance(message.not_before - self.clock.now())
        return redelivered(message)


def first_delivery(job: Job) -> JobMessage:
    return JobMessage(job.id, job.type, job.queue, job.tenant_id, "m0")


def redelivered(message: Envelope) -> JobMessage:
    """What the worker makes of a job message it receives (jobrail.transport.tasks)."""
    body = json.loads(message.body)
    labels = body["labels"]
    not_before = labels.get("not_before")
    return JobMessage(
        job_id=JobId(uuid.UUID(body["kwargs"]["job_id"])),
        job_type=body["task_name"],
        queue=labels["queue_name"],
        tenant_id=labels["tenant_id"],
        message_id=body["task_id"],
        deferrals=int(labels.get("deferrals", 0)),
        not_before=datetime.fromtimestamp(not_before, UTC) if not_before else None,
        prepaid=tuple(labels.get("prepaid", ())),
        outages=int(labels.get("outages", 0)),
    )


async def test_the_outage_backoff_counts_outage_deferrals_in_a_row_not_rate_limit_ones() -> None:
    w = Worker()
    await w.deliver(first_delivery(w.add()))  # takes the minute's only token
    job = w.add()
    message = await w.deliver(first_delivery(job))
    assert message is not None
    assert w.wait(message) == timedelta(seconds=60)  # a rate-limit deferral
    # ...and it had waited its turn at the rate limit five times before that.
    delivery = replace(w.when_due(message), deferrals=6)

    w.limits.down = True  # Redis goes away as the job comes back
    waits = []
    for _ in range(4):
        message = await w.deliver(delivery)
        assert message is not None
        waits.append(w.wait(message).total_seconds())
        delivery = w.when_due(message)

    # Doubling from the first step: the rate-limit deferrals before do not count.
    assert waits == [0.5, 1.0, 2.0, 4.0]
    assert json.loads(message.body)["labels"]["deferrals"] == 10
    assert w.store.jobs[job.id].status is JobStatus.PENDING
    assert w.store.jobs[job.id].attempts == 0


async def test_a_deferral_for_another_reason_ends_the_outage_count() -> None:
    w = Worker()
    await w.deliver(first_delivery(w.add()))  # the minute's token is taken
    job = w.add()
    w.limits.down = True
    message = await w.deliver(first_delivery(job))
    for _ in range(3):
        assert message is not None
        message = await w.deliver(w.when_due(message))
    assert message is not None
    assert w.wait(message) == timedelta(seconds=4)  # the fourth outage deferral in a row

    w.limits.down = False  # Redis is back; the bucket is still spent: a rate-limit wait
    message = await w.deliver(w.when_due(message))
    assert message is not None
    assert "outages" not in json.loads(message.body)["labels"]
    w.limits.down = True  # and away again: the backoff starts over
    message = await w.deliver(w.when_due(message))

    assert message is not None
    assert w.wait(message) == timedelta(seconds=0.5)


async def test_the_outage_backoff_is_capped() -> None:
    gate = JobGate(
        FlakyLimits(FixedClock()),
        LimitCounters(),
        GateConfig(jitter=0.0, unavailable_retry_max=timedelta(seconds=30)),
    )
    gate._backend.down = True  # type: ignore[attr-defined]

    verdicts = [
        await gate.enter(ONE_PER_MINUTE, ["vendor:acme"], deferrals=100, outages=n)
        for n in (0, 5, 6, 100)
    ]

    assert all(isinstance(v, Deferred) and v.unavailable for v in verdicts)
    assert [v.delay.total_seconds() for v in verdicts if isinstance(v, Deferred)] == [
        0.5,
        16.0,
        30.0,
        30.0,
    ]


def test_a_reservation_label_names_its_bucket_state_and_anything_else_is_none() -> None:
    label = reservation("vendor:acme:eu", "0123456789abcdef")

    assert reservations([label]) == {"vendor:acme:eu": "0123456789abcdef"}
    # A label from before reservations named their bucket state was only the key: no
    # reservation, so such a job competes for its token again.
    assert reservations(["vendor:acme", "", ":k", "xyz:"]) == {}


def test_a_reservation_label_names_until_when_it_may_be_used() -> None:
    label = reservation("vendor:acme:eu", "0123456789abcdef", 1733400000123.25)

    assert reservations([label]) == {"vendor:acme:eu": "0123456789abcdef@1733400000123.25"}
    # A time that is not one is no reservation: such a job competes for its token again.
    assert reservations(["0123456789abcdef@soon:k", "0123456789abcdef@inf:k"]) == {}
    assert reservations(["0123456789abcdef@nan:k", "0123456789abcdef@:k"]) == {}


async def test_a_rate_limited_job_releases_nothing_after_it_ran() -> None:
    """Rate limits hold nothing while a job runs: its release is no round trip."""
    clock = FixedClock()
    limits = CountingLimits(clock)
    gate = JobGate(limits, LimitCounters(), GateConfig(jitter=0.0))
    admitted = await gate.enter(ONE_PER_MINUTE, ["vendor:acme"])
    assert not isinstance(admitted, Deferred)

    await admitted.release()
    assert limits.released == []
    await admitted.release(refund=True)  # never started: its token goes back
    assert limits.released == [True]


class CountingLimits(MemoryLimits):
    def __init__(self, clock: FixedClock) -> None:
        super().__init__(clock_ms=lambda: clock.now().timestamp() * 1000)
        self.released: list[bool] = []

    async def release(self, grant: Any, *, refund: bool = False, now_ms: Any = None) -> None:
        self.released.append(refund)
        await super().release(grant, refund=refund, now_ms=now_ms)


def test_the_outage_count_travels_in_the_message_and_must_be_a_whole_number() -> None:
    job = make_job()
    message = encode(first_delivery(job).again(deferred=True, outages=3))
    body = json.loads(message.body)

    assert parse_job_message(message.body).labels["outages"] == 3
    assert redelivered(message).outages == 3
    body["labels"]["outages"] = "3"
    with pytest.raises(MalformedMessageError, match="outages"):
        parse_job_message(json.dumps(body).encode())
