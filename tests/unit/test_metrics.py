"""Metrics without services: the runner's observer, the enqueue counter, the limit
counters and the scrape-time backlog, each read back from its Prometheus registry."""

import asyncio
import multiprocessing
from collections.abc import Iterator, Mapping
from datetime import datetime, timedelta
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from jobrail.jobs.domain import Job
from jobrail.jobs.messages import JobMessage
from jobrail.jobs.operator_reads import QueueDepth
from jobrail.jobs.retry import RetryPolicy
from jobrail.kernel.errors import BrokerUnavailableError, PermanentError, TransientError
from jobrail.limits.counters import LimitCounters
from jobrail.outbox.committing import intake_units
from jobrail.settings import MetricsSettings
from jobrail.telemetry.backlog import Backlog
from jobrail.telemetry.job_metrics import JobMetrics
from jobrail.telemetry.metrics import Metrics
from jobrail.telemetry.metrics_server import bearer_matches, metrics_token, worker_index
from jobrail.worker.context import JobContext
from jobrail.worker.runner import JobRun, JobRunner, RunnerConfig
from tests.fakes import (
    START,
    FakeDispatcher,
    FakeJobIntake,
    FakeJobStore,
    FakePublisher,
    FixedClock,
    make_job,
)


class Worker:
    """A runner over fakes whose observer is the metrics under test."""

    def __init__(self) -> None:
        self.clock = FixedClock()
        self.store = FakeJobStore()
        self.registry = CollectorRegistry()
        self.metrics = JobMetrics(self.registry, ["demo.echo", "billing.pay"])
        self.runner = JobRunner(
            self.store,
            FakeDispatcher(),
            FakePublisher(),
            self.clock,
            RetryPolicy(base_s=1, cap_s=60, jitter=False, max_attempts_unknown=2),
            RunnerConfig("jobs.dlq", timedelta(seconds=10), timedelta(milliseconds=1)),
            observer=self.metrics,
        )

    def add(self, **overrides: Any) -> Job:
        job = make_job(**overrides)
        self.store.jobs[job.id] = job
        return job

    async def run(self, job: Job, error: BaseException | None = None, took_s: float = 0) -> Job:
        async def handler(payload: Mapping[str, Any], ctx: JobContext) -> dict[str, str]:
            self.clock.advance(timedelta(seconds=took_s))
            if error is not None:
                raise error
            return {"ok": "yes"}

        delivery = JobMessage(job.id, job.type, job.queue, job.tenant_id, "m1")
        await self.runner.run(delivery, JobRun(handler, timedelta(seconds=30)))
        return self.store.jobs[job.id]

    def value(self, name: str, **labels: str) -> float:
        return self.registry.get_sample_value(name, labels) or 0.0


async def test_a_job_that_succeeds_is_counted_once_with_its_waits_and_its_runtime() -> None:
    w = Worker()
    job = w.add()
    w.clock.advance(timedelta(seconds=3))  # waited in the queue

    await w.run(job, took_s=0.5)

    assert w.value("jobrail_jobs_succeeded_total", job_type="demo.echo") == 1
    assert w.value("jobrail_job_time_to_start_seconds_sum", job_type="demo.echo") == 3
    runtime = {"job_type": "demo.echo", "outcome": "succeeded"}
    assert w.value("jobrail_job_runtime_seconds_sum", **runtime) == 0.5
    assert w.value("jobrail_job_time_to_complete_seconds_sum", **runtime) == 3.5
    assert w.value("jobrail_job_time_to_complete_seconds_bucket", **runtime, le="2.5") == 0
    assert w.value("jobrail_job_time_to_complete_seconds_bucket", **runtime, le="5.0") == 1


async def test_a_retried_then_failed_job_counts_one_retry_one_failure_and_one_start() -> None:
    w = Worker()
    job = w.add(max_attempts=2)

    await w.run(job, TransientError("vendor timeout"))
    w.clock.advance(timedelta(seconds=1))
    await w.run(job, TransientError("vendor timeout"))

    assert w.value("jobrail_jobs_retried_total", job_type="demo.echo") == 1
    assert w.value("jobrail_jobs_failed_total", job_type="demo.echo") == 1
    assert w.value("jobrail_jobs_succeeded_total", job_type="demo.echo") == 0
    # Time to start is the first start only, not the retry's backoff.
    assert w.value("jobrail_job_time_to_start_seconds_count", job_type="demo.echo") == 1
    for outcome in ("retrying", "failed"):
        labels = {"job_type": "demo.echo", "outcome": outcome}
        assert w.value("jobrail_job_runtime_seconds_count", **labels) == 1
    assert (
        w.value(
            "jobrail_job_time_to_complete_seconds_count", job_type="demo.echo", outcome="failed"
        )
        == 1
    )
    assert (
        w.value(
            "jobrail_job_time_to_complete_seconds_count", job_type="demo.echo", outcome="retrying"
        )
        == 0
    )


async def test_a_permanent_error_is_a_failure_without_a_retry() -> None:
    w = Worker()

    await w.run(w.add(), PermanentError("no such account"))

    assert w.value("jobrail_jobs_failed_total", job_type="demo.echo") == 1
    assert w.value("jobrail_jobs_retried_total", job_type="demo.echo") == 0


def test_known_job_types_are_exported_at_zero_before_any_job_runs() -> None:
    w = Worker()

    for name in ("enqueued", "succeeded", "failed", "retried"):
        for job_type in ("demo.echo", "billing.pay"):
            assert (
                w.registry.get_sample_value(f"jobrail_jobs_{name}_total", {"job_type": job_type})
                == 0
            )


async def test_an_idempotent_replay_is_not_counted_as_a_new_enqueue() -> None:
    registry = CollectorRegistry()
    metrics = JobMetrics(registry)
    units = intake_units(FakeJobIntake({}), FakeDispatcher(), metrics)
    first = make_job(idempotency_key="k1")
    replay = make_job(idempotency_key="k1")
    other_type = make_job(type="billing.pay")

    for job in (first, replay, other_type):
        async with units() as uow:
            await uow.intake.add(job, _message())
            await uow.commit()

    assert registry.get_sample_value("jobrail_jobs_enqueued_total", {"job_type": "demo.echo"}) == 1
    assert (
        registry.get_sample_value("jobrail_jobs_enqueued_total", {"job_type": "billing.pay"}) == 1
    )


class Queues:
    """A broker's queue statistics, answering or not, counting how often it was asked."""

    def __init__(self) -> None:
        self.asked = 0
        self.up = True
        self.ready = 3

    async def queue_depths(self) -> list[QueueDepth]:
        self.asked += 1
        if not self.up:
            raise BrokerUnavailableError("connection refused")
        return [QueueDepth("jobs.default", self.ready, 2), QueueDepth("jobs.dlq", 1, 0)]


class Outbox:
    def __init__(self, oldest: datetime | None) -> None:
        self.oldest = oldest

    async def oldest_unpublished(self) -> datetime | None:
        return self.oldest


def _metrics(queues: Queues, outbox: Outbox, ttl_s: float = 60.0) -> Metrics:
    clock = FixedClock(START + timedelta(seconds=7))
    backlog = Backlog(queues, outbox, clock, "jobs.dlq", ttl_s=ttl_s, timeout_s=1.0)
    return Metrics(["demo.echo"], LimitCounters(), backlog)


def _samples(text: bytes) -> dict[str, float]:
    samples = {}
    for line in text.decode().splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            samples[name] = float(value)
    return samples


async def test_a_scrape_shows_queue_depths_dead_letters_and_the_outbox_lag() -> None:
    metrics = _metrics(Queues(), Outbox(oldest=START))

    samples = _samples(await metrics.render())

    assert samples['jobrail_queue_depth{queue="jobs.default"}'] == 3
    assert samples['jobrail_queue_consumers{queue="jobs.default"}'] == 2
    assert samples["jobrail_dlq_depth"] == 1
    assert samples["jobrail_outbox_lag_seconds"] == 7
    assert not any('queue="jobs.dlq"' in name for name in samples)


async def test_an_empty_outbox_has_no_lag() -> None:
    metrics = _metrics(Queues(), Outbox(oldest=None))

    assert _samples(await metrics.render())["jobrail_outbox_lag_seconds"] == 0


async def test_a_scrape_storm_asks_the_broker_once_per_ttl() -> None:
    queues = Queues()
    metrics = _metrics(queues, Outbox(None), ttl_s=60)

    await asyncio.gather(*(metrics.render() for _ in range(50)))
    queues.ready = 9
    samples = _samples(await metrics.render())

    assert queues.asked == 1
    assert samples['jobrail_queue_depth{queue="jobs.default"}'] == 3  # the cached lookup


async def test_a_broker_that_cannot_be_asked_leaves_its_series_out_of_a_scrape_that_succeeds() -> (
    None
):
    queues = Queues()
    queues.up = False
    metrics = _metrics(queues, Outbox(None), ttl_s=0.01)

    samples = _samples(await metrics.render())

    assert not any(name.startswith(("jobrail_queue_", "jobrail_dlq_")) for name in samples)
    assert samples["jobrail_outbox_lag_seconds"] == 0
    assert samples['jobrail_jobs_enqueued_total{job_type="demo.echo"}'] == 0

    queues.up = True
    await asyncio.sleep(0.02)
    assert _samples(await metrics.render())["jobrail_dlq_depth"] == 1


async def test_a_worker_thread_scrape_runs_its_lookups_on_the_worker_loop() -> None:
    queues = Queues()
    metrics = _metrics(queues, Outbox(None))
    loop = asyncio.get_running_loop()

    await asyncio.to_thread(metrics.backlog.refresh_from, loop)

    assert queues.asked == 1
    assert metrics.backlog.depths is not None


def test_a_scrape_while_the_worker_loop_is_closed_serves_what_is_cached() -> None:
    metrics = _metrics(Queues(), Outbox(None))
    loop = asyncio.new_event_loop()
    loop.close()

    metrics.backlog.refresh_from(loop)

    assert metrics.backlog.depths is None


class BrokenOutbox:
    async def oldest_unpublished(self) -> datetime | None:
        raise RuntimeError("relation outbox does not exist")


async def test_an_unexpected_lookup_error_leaves_only_that_series_out() -> None:
    clock = FixedClock()
    backlog = Backlog(Queues(), BrokenOutbox(), clock, "jobs.dlq", ttl_s=1, timeout_s=1)
    metrics = Metrics([], LimitCounters(), backlog)

    samples = _samples(await metrics.render())

    assert "jobrail_outbox_lag_seconds" not in samples
    assert samples["jobrail_dlq_depth"] == 1


async def test_what_the_limits_decided_is_exported_as_counters() -> None:
    counters = LimitCounters()
    metrics = Metrics([], counters, Backlog(Queues(), Outbox(None), FixedClock(), "jobs.dlq", 1, 1))
    counters.admitted += 3
    counters.deferred += 2
    counters.lock_contention += 1
    counters.api_rate_limited += 4

    samples = _samples(await metrics.render())

    assert samples["jobrail_limit_admitted_total"] == 3
    assert samples["jobrail_limit_deferred_total"] == 2
    assert samples["jobrail_lock_contention_total"] == 1
    assert samples["jobrail_lock_lost_total"] == 0
    assert samples["jobrail_api_rate_limited_total"] == 4


@pytest.fixture
def process_name() -> Iterator[Any]:
    process = multiprocessing.current_process()
    name = process.name
    yield process
    process.name = name


@pytest.mark.parametrize(
    ("name", "index"), [("worker-0", 0), ("worker-3", 3), ("MainProcess", 0), ("worker-x", 0)]
)
def test_each_taskiq_worker_process_knows_its_index_for_its_port(
    process_name: Any, name: str, index: int
) -> None:
    process_name.name = name

    assert worker_index() == index


def test_a_scrape_token_is_checked_only_when_one_is_set() -> None:
    assert metrics_token(MetricsSettings()) is None
    assert metrics_token(MetricsSettings(token="")) is None  # type: ignore[arg-type]
    assert metrics_token(MetricsSettings(token="s3cret")) == "s3cret"  # type: ignore[arg-type]
    assert bearer_matches("Bearer s3cret", "s3cret")
    assert bearer_matches("bearer s3cret", "s3cret")
    assert not bearer_matches("Bearer other", "s3cret")
    assert not bearer_matches(None, "s3cret")
    assert not bearer_matches("Basic s3cret", "s3cret")


def _message() -> JobMessage:
    job = make_job()
    return JobMessage(job_id=job.id, job_type=job.type, queue=job.queue, tenant_id=job.tenant_id)
