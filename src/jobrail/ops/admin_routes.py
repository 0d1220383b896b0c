"""The routers of the admin endpoints: under ``/admin``, for admin API keys only, on the
read budget of the API's rate limits. Each module of admin routes makes its own (the app
adds their routes one by one: jobrail.runtime.app.add_routes)."""

from dishka.integrations.fastapi import DishkaRoute
from fastapi import APIRouter, Depends

from jobrail.http.auth import require_admin
from jobrail.http.errors import ADMIN_ERROR_RESPONSES
from jobrail.http.rate_limits import RateLimitRead


def admin_router() -> APIRouter:
    return APIRouter(
        prefix="/admin",
        tags=["admin"],
        route_class=DishkaRoute,
        responses=ADMIN_ERROR_RESPONSES,
        dependencies=[Depends(require_admin), RateLimitRead],
    )
