"""Sync: external accounts kept in step with a vendor API, one sync per account at a time."""

from fastapi import APIRouter

from contexts.sync.adapters.api import router
from contexts.sync.adapters.ioc import SyncProvider
from contexts.sync.adapters.sandbox import SandboxState, sandbox_router
from contexts.sync.adapters.settings import SyncSettings
from contexts.sync.adapters.tasks import sync_account
from jobrail.modules import Module

_settings = SyncSettings()
_routers: list[APIRouter] = [router]
if _settings.sandbox:
    _sandbox = APIRouter(prefix="/sandbox/vendor")
    _sandbox.include_router(
        sandbox_router(
            SandboxState(
                rate_per_s=_settings.sandbox_rate_per_s,
                page_size=_settings.sandbox_page_size,
                page_delay_ms=_settings.sandbox_page_delay_ms,
            )
        )
    )
    _routers.append(_sandbox)

module = Module(name="sync", jobs=[sync_account], routers=_routers, providers=[SyncProvider()])
