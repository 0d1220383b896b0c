"""``GET /metrics``: the API process's Prometheus metrics (text exposition format).

Authentication: by a token of its own, ``JOBRAIL_METRICS__TOKEN`` (the scraper sends it
as a bearer token, Prometheus's ``authorization: {credentials: …}``); a tenant API key is
the wrong credential for an operator's scraper. The series carry no tenant ids, job ids or
payload values (only job types, queue names and outcomes), so outside production the
route is open when no token is set: Prometheus on a laptop or an internal network
scrapes without credentials. Production requires the token: ``jobrail api`` and
``jobrail worker`` refuse to start without one (``Settings.check_can_serve``), and an app
built some other way refuses every scrape rather than serving them to anyone. Turn the
route off with ``JOBRAIL_METRICS__API_ENABLED=false``. The route is outside the tenant
API rate limits: it has no tenant, and a scraper must never be answered 429.
"""

from dishka.integrations.fastapi import DishkaRoute, FromDishka
from fastapi import APIRouter, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST

from jobrail.http.errors import error_response
from jobrail.settings import Settings
from jobrail.telemetry.metrics import Metrics
from jobrail.telemetry.metrics_server import bearer_matches, metrics_token

router = APIRouter(tags=["metrics"], route_class=DishkaRoute, include_in_schema=False)


@router.get("/metrics")
async def metrics(
    request: Request, metrics: FromDishka[Metrics], settings: FromDishka[Settings]
) -> Response:
    if not settings.metrics.api_enabled:
        return error_response(404, "not_found", "Not Found")
    token = metrics_token(settings.metrics)
    if token is None and settings.environment == "production":
        return error_response(
            403,
            "forbidden",
            "production serves /metrics only with a metrics token: set JOBRAIL_METRICS__TOKEN",
        )
    if token is not None and not bearer_matches(request.headers.get("authorization"), token):
        return error_response(
            401,
            "unauthorized",
            "metrics need the metrics token: Authorization: Bearer <JOBRAIL_METRICS__TOKEN>",
            headers={"WWW-Authenticate": "Bearer"},
        )
    return Response(await metrics.render(), media_type=CONTENT_TYPE_LATEST)
