"""The series of the jobs a process enqueued and ran: counters and a duration histogram
per job type and outcome, their label children made once per type (no string
formatting per job)."""

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime

from prometheus_client import CollectorRegistry, Counter, Histogram

from jobrail.jobs.domain import Job, JobStatus

# From a few milliseconds (a quick job, an idle queue) to an hour (a long job, a backlog).
DURATION_BUCKETS = (
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    300.0,
    900.0,
    3600.0,
)


@dataclass(slots=True)
class _TypeSeries:
    """The label children of one job type, made once and reused for every job."""

    enqueued: Counter
    succeeded: Counter
    failed: Counter
    retried: Counter
    time_to_start: Histogram
    runtime: dict[str, Histogram] = field(default_factory=dict)
    time_to_complete: dict[str, Histogram] = field(default_factory=dict)


class JobMetrics:
    """Counts and times jobs: the runner's observer and the enqueue counter.

    - time to start: from ``created_at`` to ``started_at`` of a job's first start
      (first attempt, no error yet): a retry, a lease takeover, a job given back by a
      throttle or a redriven job would measure its backoff or its history instead.
      A job enqueued with ``run_after`` includes the wait it asked for.
    - runtime: one attempt, from its start to its outcome, by outcome.
    - time to complete: from ``created_at`` to ``finished_at`` of a finished job, by
      outcome (succeeded, failed, cancelled).
    """

    def __init__(self, registry: CollectorRegistry, job_types: Iterable[str] = ()) -> None:
        by_type = ["job_type"]
        by_outcome = ["job_type", "outcome"]
        self._enqueued = Counter(
            "jobrail_jobs_enqueued",
            "New jobs recorded, whatever made them (an enqueue, an event's delivery, a "
            "batch's members and callbacks, a chain's steps; an idempotent replay or a "
            "redrive is not one), by job type.",
            by_type,
            registry=registry,
        )
        self._succeeded = Counter(
            "jobrail_jobs_succeeded", "Jobs that succeeded.", by_type, registry=registry
        )
        self._failed = Counter(
            "jobrail_jobs_failed",
            "Jobs that failed for good (dead-lettered).",
            by_type,
            registry=registry,
        )
        self._retried = Counter(
            "jobrail_jobs_retried",
            "Attempts that ended in a scheduled retry.",
            by_type,
            registry=registry,
        )
        self._time_to_start = Histogram(
            "jobrail_job_time_to_start_seconds",
            "From a job's creation to its first start.",
            by_type,
            registry=registry,
            buckets=DURATION_BUCKETS,
        )
        self._runtime = Histogram(
            "jobrail_job_runtime_seconds",
            "How long one attempt ran, by outcome.",
            by_outcome,
            registry=registry,
            buckets=DURATION_BUCKETS,
        )
        self._time_to_complete = Histogram(
            "jobrail_job_time_to_complete_seconds",
            "From a job's creation to its end, by outcome.",
            by_outcome,
            registry=registry,
            buckets=DURATION_BUCKETS,
        )
        self._series: dict[str, _TypeSeries] = {}
        for job_type in job_types:
            # Known types start at zero, so rate() sees their first increment.
            self._for(job_type)

    def enqueued(self, job_type: str) -> None:
        self._for(job_type).enqueued.inc()

    def claimed(self, job: Job) -> None:
        if job.attempts != 1 or job.last_error is not None or job.started_at is None:
            return
        self._for(job.type).time_to_start.observe(seconds_between(job.created_at, job.started_at))

    def recorded(self, job: Job, attempt_started_at: datetime) -> None:
        series = self._for(job.type)
        status = job.status
        outcome = status.value
        ended = job.finished_at or job.updated_at
        runtime = series.runtime.get(outcome)
        if runtime is None:
            runtime = series.runtime[outcome] = self._runtime.labels(job.type, outcome)
        runtime.observe(seconds_between(attempt_started_at, ended))
        if status is JobStatus.RETRYING:
            series.retried.inc()
            return
        if status is JobStatus.SUCCEEDED:
            series.succeeded.inc()
        elif status is JobStatus.FAILED:
            series.failed.inc()
        if job.finished_at is not None:
            complete = series.time_to_complete.get(outcome)
            if complete is None:
                complete = series.time_to_complete[outcome] = self._time_to_complete.labels(
                    job.type, outcome
                )
            complete.observe(seconds_between(job.created_at, job.finished_at))

    def _for(self, job_type: str) -> _TypeSeries:
        series = self._series.get(job_type)
        if series is None:
            series = self._series[job_type] = _TypeSeries(
                enqueued=self._enqueued.labels(job_type),
                succeeded=self._succeeded.labels(job_type),
                failed=self._failed.labels(job_type),
                retried=self._retried.labels(job_type),
                time_to_start=self._time_to_start.labels(job_type),
            )
        return series


def seconds_between(start: datetime, end: datetime) -> float:
    """Seconds from `start` to `end`, never negative: the clocks of the API and of the
    workers differ a little."""
    return max(0.0, (end - start).total_seconds())
