"""The API's HTTP server series: requests counted and timed by method, route template
and status.

The route is the template FastAPI matched (``/jobs/{job_id}``), never the raw path: a
job id in a path would make a new series per job. A request that matched no route (a
404 of a made-up path, a 413 refused before routing) is counted under ``_unmatched``.
"""

from prometheus_client import CollectorRegistry, Counter, Histogram

UNMATCHED_ROUTE = "_unmatched"

# From a health check (a millisecond) to a slow report page (ten seconds).
HTTP_DURATION_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0)


class HttpServerMetrics:
    """``jobrail_http_requests_total`` and ``jobrail_http_request_duration_seconds``."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.requests = Counter(
            "jobrail_http_requests",
            "HTTP requests answered, by method, route template and status.",
            ["method", "route", "status"],
            registry=registry,
        )
        self.duration = Histogram(
            "jobrail_http_request_duration_seconds",
            "Time from a request's arrival to the end of its response, by method, route "
            "template and status class (2xx, 4xx, ...).",
            ["method", "route", "status_class"],
            buckets=HTTP_DURATION_BUCKETS,
            registry=registry,
        )

    def observe(self, method: str, route: str | None, status: int, seconds: float) -> None:
        route = route or UNMATCHED_ROUTE
        self.requests.labels(method, route, str(status)).inc()
        self.duration.labels(method, route, f"{status // 100}xx").observe(seconds)
