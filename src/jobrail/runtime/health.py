import asyncio

from dishka.integrations.fastapi import DishkaRoute, FromDishka
from fastapi import APIRouter
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from jobrail.settings import Settings
from jobrail.transport.brokers import JobBroker

router = APIRouter(tags=["health"])
ready_router = APIRouter(tags=["health"], route_class=DishkaRoute)


class Health(BaseModel):
    status: str


class Readiness(BaseModel):
    status: str
    checks: dict[str, str]


@router.get("/health", summary="Liveness: the process answers")
async def health() -> Health:
    return Health(status="ok")


@ready_router.get(
    "/ready",
    summary="Readiness: the database and the broker answer",
    responses={503: {"model": Readiness, "description": "Something is not ready"}},
)
async def ready(
    engine: FromDishka[AsyncEngine], broker: FromDishka[JobBroker], settings: FromDishka[Settings]
) -> JSONResponse:
    checks = {
        "database": await _database(engine, settings.api.ready_timeout_s),
        "broker": "ok" if broker.is_connected else "not connected",
    }
    ok = all(value == "ok" for value in checks.values())
    body = Readiness(status="ready" if ok else "not ready", checks=checks)
    return JSONResponse(body.model_dump(), status_code=200 if ok else 503)


async def _database(engine: AsyncEngine, timeout: float) -> str:
    try:
        async with asyncio.timeout(timeout):
            async with engine.connect() as conn:
                await conn.execute(text("SELECT 1"))
    except TimeoutError:
        return "timed out"
    except Exception as exc:  # noqa: BLE001 - any failure means "not ready"
        return f"unavailable ({type(exc).__name__})"
    return "ok"
