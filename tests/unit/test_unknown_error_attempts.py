"""An unexpected error (here a ValueError) gets as many attempts as its job type's own
max_attempts, when the type declares one; JOBRAIL_RETRY__MAX_ATTEMPTS_UNKNOWN (3) bounds
only the types that declare none."""

from datetime import timedelta

from pydantic import BaseModel

from jobrail.jobs.domain import Job, JobStatus
from jobrail.jobs.enqueue import new_job
from jobrail.jobs.intake import EnqueueJobCommand
from jobrail.jobs.messages import JobMessage
from jobrail.jobs.registry import JobRegistry, JobSpec, job
from jobrail.jobs.retry import RetryPolicy
from jobrail.kernel.errors import TransientError
from jobrail.kernel.ids import TenantId
from jobrail.worker.context import JobContext
from jobrail.worker.outcomes import classify, retry_limit
from jobrail.worker.runner import JobRun, JobRunner, RunnerConfig
from tests.fakes import FakeDispatcher, FakeJobStore, FakePublisher, FixedClock

DEFAULT_MAX_ATTEMPTS = 5  # JOBRAIL_RETRY__MAX_ATTEMPTS
MAX_ATTEMPTS_UNKNOWN = 3  # JOBRAIL_RETRY__MAX_ATTEMPTS_UNKNOWN
TIMEOUT = timedelta(seconds=30)


class Parse(BaseModel):
    text: str


@job("test.parse_with_four_attempts", payload=Parse, max_attempts=4)
async def parse_with_four_attempts(payload: Parse, ctx: JobContext) -> None:
    int(payload.text)


@job("test.parse", payload=Parse)
async def parse(payload: Parse, ctx: JobContext) -> None:
    int(payload.text)


REGISTRY = JobRegistry(
    [parse_with_four_attempts, parse], queues=["jobs.default"], default_timeout_s=30
)


def policy_of(registry: JobRegistry) -> RetryPolicy:
    """The retry policy as the composition root makes it (jobrail.runtime.container)."""
    return RetryPolicy(
        base_s=1,
        cap_s=60,
        jitter=False,
        max_attempts_unknown=MAX_ATTEMPTS_UNKNOWN,
        own_max_attempts=registry.own_max_attempts(),
    )


async def run_until_it_ends(spec: JobSpec) -> Job:
    """Enqueue a job of `spec`'s type as EnqueueJob does, and run it through the runner,
    attempt after attempt, until it stops being retried."""
    clock = FixedClock()
    store = FakeJobStore()
    runner = JobRunner(
        store,
        FakeDispatcher(),
        FakePublisher(),
        clock,
        policy_of(REGISTRY),
        RunnerConfig(
            dead_letter_queue="jobs.dlq",
            lease_grace=timedelta(seconds=10),
            store_retry_max=timedelta(milliseconds=1),
        ),
    )
    command = EnqueueJobCommand(TenantId("acme"), spec.name, {"text": "four"})
    job_type = REGISTRY.get(spec.name)
    assert job_type is not None
    job = new_job(job_type, command, clock.now(), DEFAULT_MAX_ATTEMPTS)
    store.jobs[job.id] = job

    async def handler(payload: object, ctx: JobContext) -> None:
        await spec.handler(Parse.model_validate(payload), ctx)

    for n in range(10):
        delivery = JobMessage(job.id, job.type, job.queue, job.tenant_id, f"m{n}", 0, None, ())
        await runner.run(delivery, JobRun(handler, TIMEOUT))
        job = store.jobs[job.id]
        if job.status is not JobStatus.RETRYING:
            return job
        assert job.run_after is not None
        clock.current = job.run_after
    raise AssertionError(f"still retrying after 10 attempts: {job}")


async def test_a_type_that_asks_for_four_attempts_gets_four_for_a_value_error() -> None:
    job = await run_until_it_ends(parse_with_four_attempts)

    assert job.status is JobStatus.FAILED
    assert job.attempts == 4
    assert job.last_error == (
        "unexpected error: ValueError: invalid literal for int() with base 10: 'four' "
        "(gave up after 4 attempts)"
    )


async def test_a_type_without_max_attempts_gets_the_platforms_three_for_a_value_error() -> None:
    job = await run_until_it_ends(parse)

    assert job.max_attempts == DEFAULT_MAX_ATTEMPTS
    assert job.status is JobStatus.FAILED
    assert job.attempts == MAX_ATTEMPTS_UNKNOWN


def test_the_limit_for_each_kind_of_error_and_type() -> None:
    policy = policy_of(REGISTRY)
    unknown = classify(ValueError("x"), TIMEOUT)
    transient = classify(TransientError("t"), TIMEOUT)

    assert REGISTRY.own_max_attempts() == {"test.parse_with_four_attempts"}
    assert retry_limit(unknown, 4, policy, "test.parse_with_four_attempts") == 4
    assert retry_limit(unknown, 5, policy, "test.parse") == 3
    assert retry_limit(unknown, 5, policy) == 3  # a type not named: the platform's bound
    assert retry_limit(unknown, 2, policy, "test.parse") == 2  # never more than the job's
    assert retry_limit(transient, 5, policy, "test.parse") == 5
    # A type's own retry backoff keeps its own attempts.
    assert policy.for_type(0.1, 2.0).own_max_attempts == policy.own_max_attempts
