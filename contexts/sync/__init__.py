"""Sync: external accounts kept in step with a vendor API, one sync per account at a time.

A large account (JOBRAIL_SYNC__PAGE_JOBS_FROM pages or more, as the vendor says on its
first page) syncs as a chain of ``sync.page`` jobs, one per page, each taking the cursor
the one before it returned and reporting its progress.

The sandbox vendor (contexts.sync.adapters.sandbox) answers without a key and lists every
tenant's account ids, so an app serves it only where nothing but a developer can reach
it: in the embedded mode by default, or in the stack mode when JOBRAIL_SYNC__SANDBOX=true
outside production. Production refuses that switch at start-up rather than ignore it,
so a deployment that set it learns that it was never served.
"""

from collections.abc import Sequence

from fastapi import APIRouter

from contexts.schema import SCHEMA
from contexts.sync.adapters.api import router
from contexts.sync.adapters.ioc import SyncProvider
from contexts.sync.adapters.sandbox import SandboxState, sandbox_router
from contexts.sync.adapters.settings import SyncSettings
from contexts.sync.adapters.tasks import sync_account, sync_page
from jobrail import Module, Settings, SettingsError


def serves_sandbox(sync: SyncSettings, settings: Settings) -> bool:
    """Whether an app built from `settings` serves the sandbox vendor; SettingsError for
    production with the sandbox switched on."""
    if sync.sandbox and settings.environment == "production":
        raise SettingsError(
            "invalid settings:\n  JOBRAIL_SYNC__SANDBOX: production never serves the sandbox "
            "vendor (it answers without a key and lists every tenant's accounts): unset it "
            "and point JOBRAIL_SYNC__VENDOR_BASE_URL at the vendor"
        )
    if sync.sandbox is None:
        return settings.embedded
    return sync.sandbox


def _sandbox_routers(settings: Settings) -> Sequence[APIRouter]:
    sync = SyncSettings()
    if not serves_sandbox(sync, settings):
        return []
    sandbox = APIRouter(prefix="/sandbox/vendor")
    sandbox.include_router(
        sandbox_router(
            SandboxState(
                rate_per_s=sync.sandbox_rate_per_s,
                page_size=sync.sandbox_page_size,
                page_delay_ms=sync.sandbox_page_delay_ms,
                max_calls=sync.sandbox_max_calls,
                max_accounts=sync.sandbox_max_accounts,
            )
        )
    )
    return [sandbox]


module = Module(
    name="sync",
    jobs=[sync_account, sync_page],
    routers=[router],
    router_factories=[_sandbox_routers],
    providers=[SyncProvider()],
    migrations=[SCHEMA],
)
