import uuid
from datetime import datetime
from typing import Annotated, Literal

from dishka.integrations.fastapi import DishkaRoute, FromDishka
from fastapi import APIRouter, Path, Request, Response
from pydantic import BaseModel

from contexts.sync.application.use_cases import AccountRef, GetAccount, RequestSync
from contexts.sync.domain.account import ACCOUNT_ID_PATTERN
from jobrail.web import (
    ERROR_RESPONSES,
    CurrentTenant,
    RateLimitEnqueue,
    RateLimitRead,
    job_location,
)

router = APIRouter(
    prefix="/sync/accounts", tags=["sync"], route_class=DishkaRoute, responses=ERROR_RESPONSES
)

AccountId = Annotated[str, Path(min_length=1, max_length=255, pattern=ACCOUNT_ID_PATTERN)]


class SyncAccepted(BaseModel):
    job_id: uuid.UUID
    status: str


class AccountOut(BaseModel):
    account_id: str
    status: Literal["never_synced", "syncing", "synced", "failed"]
    items_synced: int
    last_synced_at: datetime | None
    last_error: str | None


@router.post(
    "/{account_id}/sync",
    status_code=202,
    summary="Sync an account from the vendor",
    description=RequestSync.__doc__,
    dependencies=[RateLimitEnqueue],
)
async def request_sync(
    account_id: AccountId,
    request: Request,
    response: Response,
    tenant: CurrentTenant,
    request_sync: FromDishka[RequestSync],
) -> SyncAccepted:
    job = await request_sync(AccountRef(tenant, account_id))
    response.headers["Location"] = job_location(request, job.id)
    return SyncAccepted(job_id=job.id, status=job.status.value)


@router.get("/{account_id}", summary="An account and its last sync", dependencies=[RateLimitRead])
async def get_account(
    account_id: AccountId, tenant: CurrentTenant, get: FromDishka[GetAccount]
) -> AccountOut:
    account = await get(AccountRef(tenant, account_id))
    return AccountOut(
        account_id=account.account_id,
        status=account.status.value,
        items_synced=account.items_synced,
        last_synced_at=account.last_synced_at,
        last_error=account.last_error,
    )
