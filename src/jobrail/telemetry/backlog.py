"""The backlog as a scrape sees it: queue depths (RabbitMQ) and the outbox's lag
(Postgres), looked up at most once per ``metrics.lookup_ttl_s`` however many scrapes
come, each lookup bounded by ``metrics.lookup_timeout_s``; a lookup that fails leaves
its series out of that scrape (an ``absent()`` alert sees it) instead of failing the
scrape or repeating a stale value."""

import asyncio
import logging
import time
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import Any, Protocol

from prometheus_client.core import GaugeMetricFamily, Metric

from jobrail.jobs.operator_reads import QueueDepth, QueueStats
from jobrail.kernel.clock import Clock
from jobrail.telemetry.job_metrics import seconds_between

log = logging.getLogger("jobrail.metrics")


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
        return 0.0 if oldest is None else seconds_between(oldest, self._clock.now())

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
