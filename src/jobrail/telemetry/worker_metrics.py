"""``jobrail_workers{state}``: how many workers are alive, gone or stopped, from their
beats (jobrail.workers_seen), looked up at scrape time at most once per TTL. A lookup
that fails leaves the series out of that scrape."""

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping

from prometheus_client.core import GaugeMetricFamily, Metric

log = logging.getLogger("jobrail.metrics")


class WorkerStatesCollector:
    def __init__(
        self, lookup: Callable[[], Awaitable[Mapping[str, int]]], ttl_s: float, timeout_s: float
    ) -> None:
        self._lookup = lookup
        self._ttl_s = ttl_s
        self._timeout_s = timeout_s
        self._looked_at: float | None = None
        self.counts: Mapping[str, int] | None = None

    async def refresh(self) -> None:
        """Look again if the last lookup is older than the TTL. Never raises."""
        now = time.monotonic()
        if self._looked_at is not None and now - self._looked_at < self._ttl_s:
            return
        self._looked_at = now
        try:
            async with asyncio.timeout(self._timeout_s):
                self.counts = await self._lookup()
        except Exception as exc:  # noqa: BLE001 - a scrape never fails for this
            log.warning("metrics: cannot count the workers (%s)", type(exc).__name__)
            self.counts = None

    def collect(self) -> Iterator[Metric]:
        if self.counts is None:
            return
        gauge = GaugeMetricFamily(
            "jobrail_workers",
            "Workers by state, from their beats: alive, gone (three beats missed), stopped.",
            labels=["state"],
        )
        for state, count in self.counts.items():
            gauge.add_metric([state], count)
        yield gauge
