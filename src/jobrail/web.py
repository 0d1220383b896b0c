"""Public: what a module's FastAPI routes use.

- ``CurrentTenant``: the tenant of the request's API key (a route parameter
  annotation); every query a route makes is scoped by it.
- ``RateLimitRead``, ``RateLimitEnqueue``: the API rate limits, as route
  dependencies; enqueueing routes take the stricter one.
- ``ERROR_RESPONSES``: the documented error bodies, for a router's ``responses=``.
- ``RequestModel``: the base of request bodies (unknown fields and lax conversions
  are refused).
- ``job_location``: the URL of a job's status, for a ``202``'s ``Location`` header.
- ``EnqueueOptionsQuery``: a route's enqueue options (``run_at`` or ``delay``,
  ``deadline``, ``unique_key``) as query parameters, with ``ENQUEUE_OPENAPI`` as the
  route's ``openapi_extra``; ``EnqueueOptions.command`` makes the ``EnqueueJobCommand``.
"""

from jobrail.http.auth import CurrentTenant
from jobrail.http.errors import ERROR_RESPONSES
from jobrail.http.rate_limits import RateLimitEnqueue, RateLimitRead
from jobrail.http.schemas import RequestModel
from jobrail.jobs.options import ENQUEUE_OPENAPI, EnqueueOptions, EnqueueOptionsQuery
from jobrail.jobs.schemas import job_location

__all__ = [
    "ENQUEUE_OPENAPI",
    "ERROR_RESPONSES",
    "CurrentTenant",
    "EnqueueOptions",
    "EnqueueOptionsQuery",
    "RateLimitEnqueue",
    "RateLimitRead",
    "RequestModel",
    "job_location",
]
