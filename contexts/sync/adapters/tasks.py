"""Sync's job types: an account's sync, and one page of a large account's."""

from dishka import FromDishka
from pydantic import BaseModel, ConfigDict, Field

from contexts.sync.adapters.settings import SyncSettings
from contexts.sync.application.page_jobs import SyncPage, SyncPageCommand
from contexts.sync.application.use_cases import (
    SYNC_JOB,
    SYNC_PAGE_JOB,
    SyncAccount,
    SyncAccountCommand,
)
from contexts.sync.domain.account import ACCOUNT_ID_PATTERN
from jobrail import JobContext, Lock, TokenBucket, job

_settings = SyncSettings()

VENDOR_BUDGET = TokenBucket(
    "vendor",
    key="vendor:{tenant_id}",
    capacity=_settings.vendor_burst,
    per_second=_settings.vendor_rate_per_s,
)
ACCOUNT_LOCK = Lock(key="account:{tenant_id}:{account_id}", ttl_s=_settings.lock_ttl_s)


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
    lock=ACCOUNT_LOCK,
)
async def sync_account(
    payload: SyncPayload, ctx: JobContext, sync: FromDishka[SyncAccount]
) -> dict[str, object]:
    """Sync one account from the vendor, one at a time per account."""
    assert ctx.fence is not None
    outcome = await sync(SyncAccountCommand(ctx.tenant_id, payload.account_id, ctx.fence))
    result: dict[str, object] = {
        "account_id": outcome.account.account_id,
        "items_synced": outcome.account.items_synced,
    }
    if outcome.chain_id is not None:
        result["chain_id"] = str(outcome.chain_id)
    return result


class SyncPagePayload(BaseModel):
    model_config = ConfigDict(extra="forbid")

    account_id: str = Field(min_length=1, max_length=255, pattern=ACCOUNT_ID_PATTERN)
    page: int = Field(ge=1, description="This page's number (the account's first is 1).")
    pages: int = Field(ge=1, description="How many the vendor said the account has.")
    cursor: str | None = Field(
        default=None,
        max_length=255,
        description="The first page job's cursor; the others "
        "take the one the page job before them returned.",
    )
    last: bool = False


@job(
    SYNC_PAGE_JOB,
    payload=SyncPagePayload,
    queue="jobs.io",
    timeout_s=120,
    max_attempts=10,
    limits=[VENDOR_BUDGET],
    lock=ACCOUNT_LOCK,
)
async def sync_page(
    payload: SyncPagePayload, ctx: JobContext, sync: FromDishka[SyncPage]
) -> dict[str, object]:
    """Sync one page of a large account: a step of its sync's chain of page jobs."""
    assert ctx.fence is not None
    previous = await ctx.previous_result()
    cursor = payload.cursor if previous is None else previous.get("next_cursor")
    total = max(payload.pages, payload.page)
    await ctx.progress(payload.page - 1, total, f"page {payload.page} of {total}")
    synced = await sync(
        SyncPageCommand(
            SyncAccountCommand(ctx.tenant_id, payload.account_id, ctx.fence),
            cursor=cursor if isinstance(cursor, str) else None,
            last=payload.last,
        )
    )
    await ctx.progress(
        payload.page,
        total,
        f"page {payload.page} of {total}: {synced.new_items} new items"
        if synced.fetched
        else f"page {payload.page} of {total}: the account ended before it",
    )
    return {
        "account_id": payload.account_id,
        "page": payload.page,
        "next_cursor": synced.next_cursor,
        "new_items": synced.new_items,
        "items_synced": synced.account.items_synced,
    }
