from collections.abc import AsyncIterator

import httpx
from dishka import AnyOf, Provider, Scope, provide

from contexts.sync.adapters.persistence import SqlaSyncUnitOfWork
from contexts.sync.adapters.settings import SyncSettings
from contexts.sync.adapters.tasks import VENDOR_BUDGET
from contexts.sync.adapters.throttle import LimitsVendorThrottle
from contexts.sync.adapters.vendor import HttpVendorClient
from contexts.sync.application.page_jobs import SyncPage
from contexts.sync.application.ports import SyncUnitOfWork, VendorClient, VendorThrottle
from contexts.sync.application.use_cases import (
    GetAccount,
    PageJobsPolicy,
    RequestSync,
    SyncAccount,
)
from jobrail import Instruments, Settings
from jobrail.ports import LimitsBackend
from jobrail.sql import UnitOfWorkFactory


class SyncProvider(Provider):
    scope = Scope.REQUEST

    @provide(scope=Scope.APP)
    def settings(self) -> SyncSettings:
        return SyncSettings()

    @provide(scope=Scope.APP)
    async def http_client(
        self, settings: SyncSettings, app: Settings, instruments: Instruments
    ) -> AsyncIterator[httpx.AsyncClient]:
        base_url = settings.vendor_url(app.api.host, app.api.port)
        client = HttpVendorClient.make_client(settings, base_url)
        instruments.http_client(client)  # its calls join the job's trace (traceparent)
        yield client
        await client.aclose()

    @provide(scope=Scope.APP)
    def vendor(self, client: httpx.AsyncClient) -> VendorClient:
        return HttpVendorClient(client)

    @provide(scope=Scope.APP)
    def throttle(self, limits: LimitsBackend, settings: SyncSettings) -> VendorThrottle:
        return LimitsVendorThrottle(limits, VENDOR_BUDGET, settings.throttle_max_wait_s)

    @provide(scope=Scope.APP)
    def page_jobs(self, settings: SyncSettings) -> PageJobsPolicy:
        return PageJobsPolicy(from_pages=settings.page_jobs_from)

    @provide
    def unit_of_work(self, factory: UnitOfWorkFactory) -> AnyOf[SqlaSyncUnitOfWork, SyncUnitOfWork]:
        return factory(SqlaSyncUnitOfWork)

    request_sync = provide(RequestSync)
    sync_account = provide(SyncAccount)
    sync_page = provide(SyncPage)
    get_account = provide(GetAccount)
