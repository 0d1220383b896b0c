"""What a process's limits decided (admitted, deferred, the limits store away), as
Prometheus counters read from ``LimitCounters`` at scrape time."""

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, Metric

from jobrail.limits.counters import LimitCounters

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
