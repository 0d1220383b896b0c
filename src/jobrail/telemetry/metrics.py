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

The API adds its HTTP server series (``jobrail.telemetry.http_metrics``). Every process
also serves prometheus_client's standard process and runtime series, unprefixed as
every Prometheus exporter names them: ``process_cpu_seconds_total``,
``process_resident_memory_bytes``, ``process_open_fds``, ``python_gc_*``,
``python_info``.

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
from collections.abc import Awaitable, Iterable
from typing import Protocol

from prometheus_client import (
    CollectorRegistry,
    GCCollector,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from jobrail.limits.counters import LimitCounters
from jobrail.telemetry.backlog import Backlog
from jobrail.telemetry.http_metrics import HttpServerMetrics
from jobrail.telemetry.job_metrics import JobMetrics
from jobrail.telemetry.limit_metrics import LimitCountersCollector


class ScrapeTimeCollector(Protocol):
    """A collector whose figures are looked up when scraped, before it is collected."""

    def refresh(self) -> Awaitable[None]: ...

    def collect(self) -> Iterable[Metric]: ...


class Metrics:
    """The process's registry (its own, not prometheus_client's global one: tests
    and the embedded mode build several apps in one process)."""

    def __init__(
        self, job_types: Iterable[str], limit_counters: LimitCounters, backlog: Backlog
    ) -> None:
        self.registry = CollectorRegistry()
        self.jobs = JobMetrics(self.registry, job_types)
        self.http = HttpServerMetrics(self.registry)
        self.backlog = backlog
        self.registry.register(LimitCountersCollector(limit_counters))
        self.registry.register(backlog)
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        GCCollector(registry=self.registry)
        self._watched: list[ScrapeTimeCollector] = []

    def watch(self, collector: ScrapeTimeCollector) -> None:
        """Serve `collector`'s series too, refreshed at each scrape."""
        self._watched.append(collector)
        registered: Collector = collector
        self.registry.register(registered)

    async def _refresh_watched(self) -> None:
        for collector in self._watched:
            await collector.refresh()

    def refresh_from(self, loop: asyncio.AbstractEventLoop, timeout_s: float) -> None:
        """Before a scrape served from another thread (a worker's metrics server): the
        lookups run on the process's loop, with its connections; one that takes longer
        than `timeout_s` leaves what was cached."""
        self.backlog.refresh_from(loop)
        refresh = self._refresh_watched()
        try:
            future = asyncio.run_coroutine_threadsafe(refresh, loop)
        except RuntimeError:  # the loop is closed: the process is stopping
            refresh.close()
            return
        try:
            future.result(timeout_s)
        except TimeoutError:
            future.cancel()

    async def render(self) -> bytes:
        """The Prometheus text exposition, backlog looked up (or cached) first."""
        await self.backlog.refresh()
        await self._refresh_watched()
        return generate_latest(self.registry)
