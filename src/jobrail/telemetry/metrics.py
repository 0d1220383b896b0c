"""Prometheus metrics of one process: the jobs it enqueued and ran, what its limits
decided, and the backlog (queues, dead letters, outbox) as seen at scrape time.

Every series is prefixed ``jobrail_`` and labelled only with values from a small,
fixed set: the job type, the queue, the outcome. A job id, a tenant id or a payload
value never becomes a label: each would make a new series per job or per tenant.

Costs are kept where a scrape pays them, not where a job does. Per job, the runner
bumps a counter and feeds a histogram through label children made once per job type
(no I/O, no string formatting). Queue depths (RabbitMQ) and the outbox lag (Postgres)
are looked up when scraped, at most once per ``metrics.lookup_ttl_s`` however many
scrapes come, each lookup bounded by ``metrics.lookup_timeout_s``; a lookup that
fails leaves its series out of that scrape (an ``absent()`` alert sees it) instead of
failing the scrape or repeating a stale value.

Each process counts for itself; Prometheus adds processes up. The API serves
``GET /metrics`` (``jobrail.runtime.metrics_endpoint``). Each worker process serves its own port,
``metrics.worker_port`` plus the process's index: Taskiq names the processes it forks
``worker-0``, ``worker-1``, … and a restarted process keeps its name, hence its port.
Prometheus's multiprocess mode (one server in the parent over files the children
write) was not used: Taskiq's parent process runs none of jobrail's code, the mode
cannot serve the collectors below that read live state, and it makes every
increment a write to a memory-mapped file. Queue depths and the outbox lag are the
same for every process that reports them; aggregate them with ``max``, not ``sum``.
"""

import asyncio
import hmac
import logging
import multiprocessing
import socket
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from socketserver import ThreadingMixIn
from typing import Any, Protocol
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client import make_wsgi_app as make_exposition_app
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from jobrail.jobs.domain import Job, JobStatus
from jobrail.jobs.operator_reads import QueueDepth, QueueStats
from jobrail.kernel.clock import Clock
from jobrail.limits.counters import LimitCounters
from jobrail.settings import MetricsSettings

log = logging.getLogger("jobrail.metrics")

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
        self._for(job.type).time_to_start.observe(_seconds(job.created_at, job.started_at))

    def recorded(self, job: Job, attempt_started_at: datetime) -> None:
        series = self._for(job.type)
        status = job.status
        outcome = status.value
        ended = job.finished_at or job.updated_at
        runtime = series.runtime.get(outcome)
        if runtime is None:
            runtime = series.runtime[outcome] = self._runtime.labels(job.type, outcome)
        runtime.observe(_seconds(attempt_started_at, ended))
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
            complete.observe(_seconds(job.created_at, job.finished_at))

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


def _seconds(start: datetime, end: datetime) -> float:
    # Clocks of the API and of workers differ a little: never a negative duration.
    return max(0.0, (end - start).total_seconds())


_LIMIT_SERIES = {
    "admitted": ("jobrail_limit_admitted", "Jobs admitted by their limits and lock."),
    "deferred": ("jobrail_limit_deferred", "Jobs deferred by their limits or lock."),
    "lock_contention": (
        "jobrail_lock_contention",
        "Deferrals because a lock or a concurrency slot was taken.",
    ),
    "lock_lost": ("jobrail_lock_lost", "Attempts stopped because their lock was lost."),
    "unavailable": (
        "jobrail_limit_unavailable",
        "Limited jobs deferred because the limits store was unreachable.",
    ),
    "api_rate_limited": ("jobrail_api_rate_limited", "API requests refused with 429."),
    "api_unavailable": (
        "jobrail_api_limit_unavailable",
        "API requests refused with 503 because the limits store was unreachable.",
    ),
}


class LimitCountersCollector:
    """Exports LimitCounters, which the limits keep as plain integers (an increment
    there costs nothing and needs no prometheus_client below the limits package)."""

    def __init__(self, counters: LimitCounters) -> None:
        self._counters = counters

    def collect(self) -> Iterator[Metric]:
        snapshot = self._counters.snapshot()
        for name, (metric, documentation) in _LIMIT_SERIES.items():
            yield CounterMetricFamily(metric, documentation, value=snapshot[name])


class OutboxAge(Protocol):
    async def oldest_unpublished(self) -> datetime | None:
        """When the oldest outbox message not yet published was written (None: none)."""
        ...


class Backlog:
    """Queue depths and the outbox lag, looked up at scrape time and cached.

    A lookup happens at most once per `ttl_s` and concurrent scrapes share it, so a
    scrape storm asks RabbitMQ and Postgres nothing more."""

    def __init__(
        self,
        queues: QueueStats,
        outbox: OutboxAge,
        clock: Clock,
        dead_letter_queue: str,
        ttl_s: float,
        timeout_s: float,
    ) -> None:
        self._queues = queues
        self._outbox = outbox
        self._clock = clock
        self._dead_letter_queue = dead_letter_queue
        self._ttl_s = ttl_s
        self._timeout_s = timeout_s
        self._lock = asyncio.Lock()
        self._looked_at: float | None = None
        self.depths: list[QueueDepth] | None = None
        self.outbox_lag_s: float | None = None
        self._failing: set[str] = set()

    async def refresh(self) -> None:
        """Look again if the last lookup is older than the TTL. Never raises."""
        if self._fresh():
            return
        async with self._lock:
            if self._fresh():  # another scrape looked while this one waited
                return
            self.depths = await self._attempt("rabbitmq", self._queues.queue_depths)
            self.outbox_lag_s = await self._attempt("outbox", self._outbox_lag)
            self._looked_at = time.monotonic()

    def refresh_from(self, loop: asyncio.AbstractEventLoop) -> None:
        """`refresh` for a thread other than the loop's (the worker's metrics server):
        the lookups run on the process's loop, with its connections."""
        refresh = self.refresh()
        try:
            future = asyncio.run_coroutine_threadsafe(refresh, loop)
        except RuntimeError:  # the loop is closed: the process is stopping
            refresh.close()
            return
        try:
            future.result(self._timeout_s * 2 + 1)
        except TimeoutError:
            future.cancel()  # the loop is busy: serve what is cached

    def _fresh(self) -> bool:
        return self._looked_at is not None and time.monotonic() - self._looked_at < self._ttl_s

    async def _attempt(self, source: str, lookup: Callable[[], Any]) -> Any:
        try:
            async with asyncio.timeout(self._timeout_s):
                value = await lookup()
        except Exception as exc:  # noqa: BLE001 - a lookup that fails never fails the scrape
            if source not in self._failing:
                log.warning("metrics: cannot look up %s (%s); its series are left out", source, exc)
                self._failing.add(source)
            return None
        if source in self._failing:
            log.info("metrics: %s answers again", source)
            self._failing.discard(source)
        return value

    async def _outbox_lag(self) -> float:
        oldest = await self._outbox.oldest_unpublished()
        return 0.0 if oldest is None else _seconds(oldest, self._clock.now())

    def collect(self) -> Iterator[Metric]:
        depths, lag = self.depths, self.outbox_lag_s
        if depths is not None:
            ready = GaugeMetricFamily(
                "jobrail_queue_depth", "Messages ready in a work queue.", labels=["queue"]
            )
            consumers = GaugeMetricFamily(
                "jobrail_queue_consumers", "Consumers of a work queue.", labels=["queue"]
            )
            dead = GaugeMetricFamily("jobrail_dlq_depth", "Messages in the dead-letter queue.")
            for depth in depths:
                if depth.queue == self._dead_letter_queue:
                    dead.add_metric([], depth.ready)
                else:
                    ready.add_metric([depth.queue], depth.ready)
                    consumers.add_metric([depth.queue], depth.consumers)
            yield from (ready, consumers, dead)
        if lag is not None:
            yield GaugeMetricFamily(
                "jobrail_outbox_lag_seconds",
                "Age of the oldest outbox message not yet published (0 when none).",
                value=lag,
            )


class Metrics:
    """The process's registry (its own, not prometheus_client's global one: tests
    and the embedded mode build several apps in one process)."""

    def __init__(
        self, job_types: Iterable[str], limit_counters: LimitCounters, backlog: Backlog
    ) -> None:
        self.registry = CollectorRegistry()
        self.jobs = JobMetrics(self.registry, job_types)
        self.backlog = backlog
        self.registry.register(LimitCountersCollector(limit_counters))
        self.registry.register(backlog)

    async def render(self) -> bytes:
        """The Prometheus text exposition, backlog looked up (or cached) first."""
        await self.backlog.refresh()
        return generate_latest(self.registry)


def worker_index() -> int:
    """This worker process's index among its siblings (0 outside Taskiq's workers)."""
    prefix, _, number = multiprocessing.current_process().name.rpartition("-")
    return int(number) if prefix == "worker" and number.isdigit() else 0


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        return


class _ThreadingServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _ThreadingServer6(_ThreadingServer):
    address_family = socket.AF_INET6


class WorkerMetricsServer:
    """One worker process's metrics, on a port of its own (see the module docstring).

    It runs in a thread, so that a worker whose loop is busy or blocked still answers
    with its counters; only the backlog lookup needs the loop, and waits for it a
    bounded time."""

    def __init__(self, settings: MetricsSettings) -> None:
        self._settings = settings
        self._server: WSGIServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int | None:
        return None if self._server is None else self._server.server_port

    async def start(self, metrics: Metrics) -> None:
        """Listen, unless `worker_port` is 0. A port that cannot be had is logged, and
        the worker runs on without metrics rather than not at all."""
        if not self._settings.worker_port:
            return
        app = self._app(metrics, asyncio.get_running_loop())
        port = self._settings.worker_port + worker_index()
        host = self._settings.worker_host
        server_class = _ThreadingServer6 if ":" in host else _ThreadingServer
        try:
            if port > 65535:
                raise OSError(f"port {port} is out of range")
            self._server = make_server(host, port, app, server_class, handler_class=_QuietHandler)
        except OSError as exc:
            log.error("metrics: cannot listen on %s:%d (%s); no metrics here", host, port, exc)
            return
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="metrics-server", daemon=True
        )
        self._thread.start()
        log.info("metrics on http://%s:%d/metrics", host, port)

    async def stop(self) -> None:
        if self._server is None:
            return
        await asyncio.to_thread(self._server.shutdown)
        self._server.server_close()
        self._server = None

    def _app(
        self, metrics: Metrics, loop: asyncio.AbstractEventLoop
    ) -> Callable[..., Iterable[bytes]]:
        exposition: Callable[..., Iterable[bytes]] = make_exposition_app(metrics.registry)
        token = metrics_token(self._settings)

        def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
            if token is not None and not bearer_matches(environ.get("HTTP_AUTHORIZATION"), token):
                start_response(
                    "401 Unauthorized",
                    [("Content-Type", "text/plain"), ("WWW-Authenticate", "Bearer")],
                )
                return [b"metrics need the metrics token\n"]
            metrics.backlog.refresh_from(loop)
            return exposition(environ, start_response)

        return app


def metrics_token(settings: MetricsSettings) -> str | None:
    """The token scrapes must send, or None (an empty setting is none)."""
    token = settings.token.get_secret_value() if settings.token is not None else ""
    return token or None


def bearer_matches(authorization: str | None, token: str) -> bool:
    """Whether an Authorization header carries `token` (compared in constant time)."""
    scheme, _, given = (authorization or "").partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(given.encode(), token.encode())
