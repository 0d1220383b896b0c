"""The admin routes that pause and resume a queue, a job type or a tenant (under
``/admin``, admin keys only). What a pause does: jobrail.dispatch.pauses."""

from datetime import datetime
from typing import Annotated, Literal

from dishka.integrations.fastapi import FromDishka
from fastapi import Path
from pydantic import BaseModel, Field

from jobrail.dispatch.pauses import Pauses
from jobrail.http.schemas import RequestModel
from jobrail.jobs.ports import Pause
from jobrail.ops.admin_routes import admin_router

router = admin_router()

Scope = Literal["queue", "type", "tenant"]


class PauseIn(RequestModel):
    scope: Scope = Field(description="What to pause: a queue, a job type or a tenant.")
    value: str = Field(min_length=1, max_length=128, description="Its name.")


class PauseOut(BaseModel):
    scope: Scope
    value: str
    paused_at: datetime

    @classmethod
    def of(cls, pause: Pause) -> "PauseOut":
        return cls.model_validate(
            {"scope": pause.scope, "value": pause.value, "paused_at": pause.paused_at}
        )


class PausedOut(PauseOut):
    recalled: int = Field(
        description="Its jobs that had been released to the workers and were held again."
    )


class PauseList(BaseModel):
    items: list[PauseOut]


@router.post(
    "/pauses",
    status_code=201,
    summary="Pause a queue, a job type or a tenant",
    description="None of its jobs starts until it is resumed; running jobs finish, and "
    "nothing is lost (a deadline that passes meanwhile ends its job `expired`). Pausing "
    "what is paused already changes nothing. As `jobrail pause`.",
)
async def pause(body: PauseIn, pauses: FromDishka[Pauses]) -> PausedOut:
    paused = await pauses.pause(body.scope, body.value)
    return PausedOut(**PauseOut.of(paused.pause).model_dump(), recalled=paused.recalled)


@router.delete(
    "/pauses/{scope}/{value}",
    summary="Resume a queue, a job type or a tenant",
    description="Its jobs are released again, in fair order, at the dispatchers' next pass. "
    "404 if it is not paused. As `jobrail resume`.",
)
async def resume(
    scope: Scope,
    value: Annotated[str, Path(min_length=1, max_length=128)],
    pauses: FromDishka[Pauses],
) -> dict[str, object]:
    await pauses.resume(scope, value)
    return {"scope": scope, "value": value, "resumed": True}


@router.get("/pauses", summary="What is paused")
async def list_pauses(pauses: FromDishka[Pauses]) -> PauseList:
    return PauseList(items=[PauseOut.of(pause) for pause in await pauses.list()])
