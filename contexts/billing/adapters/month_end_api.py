"""HTTP routes of billing's month-end run. Thin: parse, build the command, call the use case."""

import uuid
from datetime import datetime
from typing import Annotated, Literal

from dishka.integrations.fastapi import DishkaRoute, FromDishka
from fastapi import APIRouter, Path, Response
from pydantic import BaseModel, EmailStr, Field

from contexts.billing.application.month_end import (
    GetMonthEndRun,
    MonthEndCommand,
    MonthEndQuery,
    StartMonthEndRun,
)
from contexts.billing.domain.month_end import BillingMonth, MonthEndRun
from jobrail.web import (
    ERROR_RESPONSES,
    CurrentTenant,
    RateLimitEnqueue,
    RateLimitRead,
    RequestModel,
)

router = APIRouter(
    prefix="/billing/month-end-runs",
    tags=["billing"],
    route_class=DishkaRoute,
    responses=ERROR_RESPONSES,
)

MONTH_PATTERN = r"^\d{4}-(0[1-9]|1[0-2])$"

Month = Annotated[str, Path(pattern=MONTH_PATTERN, examples=["2026-11"])]


class MonthEndRunIn(RequestModel):
    month: str = Field(pattern=MONTH_PATTERN, examples=["2026-11"])
    report_to: EmailStr = Field(description="Who is e-mailed the run's summary.")


class MonthEndRunOut(BaseModel):
    month: str
    status: Literal["running", "finished"]
    due: int = Field(description="Invoices the run found due (its batch's members).")
    issued: int | None = Field(description="null until the run finished.")
    failed: int | None = Field(description="null until the run finished.")
    report_to: str
    batch_id: uuid.UUID | None = Field(
        description="The batch issuing the invoices (`GET /batches/{id}`); null if none was due."
    )
    started_at: datetime
    finished_at: datetime | None

    @classmethod
    def of(cls, run: MonthEndRun) -> "MonthEndRunOut":
        return cls(
            month=str(run.month),
            status=run.status.value,
            due=run.due,
            issued=run.issued,
            failed=run.failed,
            report_to=run.report_to,
            batch_id=run.batch_id,
            started_at=run.started_at,
            finished_at=run.finished_at,
        )


@router.post(
    "",
    status_code=202,
    summary="Start the month-end run: issue every due invoice",
    description=StartMonthEndRun.__doc__,
    dependencies=[RateLimitEnqueue],
)
async def start_month_end_run(
    body: MonthEndRunIn,
    response: Response,
    tenant: CurrentTenant,
    start: FromDishka[StartMonthEndRun],
) -> MonthEndRunOut:
    started = await start(MonthEndCommand(tenant, BillingMonth.parse(body.month), body.report_to))
    if not started.created:
        response.headers["Idempotent-Replayed"] = "true"
    return MonthEndRunOut.of(started.run)


@router.get("/{month}", summary="A month-end run and its figures", dependencies=[RateLimitRead])
async def get_month_end_run(
    month: Month, tenant: CurrentTenant, get: FromDishka[GetMonthEndRun]
) -> MonthEndRunOut:
    return MonthEndRunOut.of(await get(MonthEndQuery(tenant, BillingMonth.parse(month))))
