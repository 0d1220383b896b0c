"""``GET /metrics``: the API process's Prometheus metrics (text exposition format).

Authentication: none by default. Prometheus scrapes targets on the internal network
without credentials, the series carry no tenant ids, job ids or payload values (only
job types, queue names and outcomes), and a tenant API key is the wrong credential
for an operator's scraper. A deployment whose API port is reachable from outside
either sets ``JOBRAIL_METRICS__TOKEN`` (the scraper then sends it as a bearer token,
Prometheus's ``authorization: {credentials: …}``) or turns the route off with
``JOBRAIL_METRICS__API_ENABLED=false``. The route is outside the tenant API rate
limits: it has no tenant, and a scraper must never be answered 429.
"""

from dishka.integrations.fastapi import DishkaRoute, FromDishka
from fastapi import APIRouter, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST

from jobrail.settings import Settings
from jobrail.telemetry.metrics import Metrics, bearer_matches, metrics_token

router = APIRouter(tags=["metrics"], route_class=DishkaRoute, include_in_schema=False)


@router.get("/metrics")
async def metrics(
    request: Request, metrics: FromDishka[Metrics], settings: FromDishka[Settings]
) -> Response:
    if not settings.metrics.api_enabled:
        return Response(status_code=404)
    token = metrics_token(settings.metrics)
    if token is not None and not bearer_matches(request.headers.get("authorization"), token):
        return Response(
            "metrics need the metrics token\n",
            status_code=401,
            headers={"WWW-Authenticate": "Bearer"},
            media_type="text/plain",
        )
    return Response(await metrics.render(), media_type=CONTENT_TYPE_LATEST)
