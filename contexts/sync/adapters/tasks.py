"""Sync's job type."""

from dishka import FromDishka
from pydantic import BaseModel, ConfigDict, Field

from contexts.sync.adapters.settings import SyncSettings
from contexts.sync.application.use_cases import SYNC_JOB, SyncAccount, SyncAccountCommand
from contexts.sync.domain.account import ACCOUNT_ID_PATTERN
from jobrail import JobContext, Lock, TokenBucket, job

_settings = SyncSettings()

VENDOR_BUDGET = TokenBucket(
    "vendor",
    key="vendor:{tenant_id}",
    capacity=_settings.vendor_burst,
    per_second=_settings.vendor_rate_per_s,
)


class SyncPayload(BaseModel):
    model_config = ConfigDict(extra="forbid")

    account_id: str = Field(min_length=1, max_length=255, pattern=ACCOUNT_ID_PATTERN)


@job(
    SYNC_JOB,
    payload=SyncPayload,
    queue="jobs.io",
    timeout_s=300,
    max_attempts=10,
    limits=[VENDOR_BUDGET],
    lock=Lock(key="account:{tenant_id}:{account_id}", ttl_s=_settings.lock_ttl_s),
)
async def sync_account(
    payload: SyncPayload, ctx: JobContext, sync: FromDishka[SyncAccount]
) -> dict[str, object]:
    """Sync one account from the vendor, one at a time per account."""
    assert ctx.fence is not None
    account = await sync(SyncAccountCommand(ctx.tenant_id, payload.account_id, ctx.fence))
    return {"account_id": account.account_id, "items_synced": account.items_synced}
