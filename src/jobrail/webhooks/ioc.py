from collections.abc import AsyncIterator

from dishka import Provider, Scope, provide
from sqlalchemy.ext.asyncio import AsyncEngine

from jobrail.events.persistence import SqlaJobEventLog
from jobrail.jobs.enqueue import EnqueueJob
from jobrail.kernel.clock import Clock
from jobrail.outbox.uow import UnitOfWorkFactory
from jobrail.settings import Settings
from jobrail.telemetry.instruments import Instruments
from jobrail.webhooks.persistence import SqlaWebhookOpsReads, SqlaWebhookStore, WebhookRelay
from jobrail.webhooks.resolving import GetaddrinfoResolver
from jobrail.webhooks.sending import HttpxWebhookSender
from jobrail.webhooks.use_cases import DeliverWebhook, GetWebhooksOverview, Webhooks


def _listens_at(settings: Settings) -> list[tuple[str, int]]:
    """Where `jobrail api` and `jobrail run` listen: a webhook may not point there, and
    a worker, which sees no request, knows the API by it."""
    return [(settings.api.host, settings.api.port)]


class WebhooksProvider(Provider):
    scope = Scope.APP

    @provide
    def store(self, engine: AsyncEngine, clock: Clock) -> SqlaWebhookStore:
        return SqlaWebhookStore(engine, clock)

    @provide
    def webhooks(
        self, store: SqlaWebhookStore, log: SqlaJobEventLog, clock: Clock, settings: Settings
    ) -> Webhooks:
        return Webhooks(
            store,
            log,
            clock,
            GetaddrinfoResolver(),
            private_ok=settings.events.webhook_private_addresses,
            own_hosts=_listens_at(settings),
        )

    @provide
    def ops_overview(self, engine: AsyncEngine, clock: Clock) -> GetWebhooksOverview:
        return GetWebhooksOverview(SqlaWebhookOpsReads(engine), clock)

    @provide
    async def sender(
        self, settings: Settings, instruments: Instruments
    ) -> AsyncIterator[HttpxWebhookSender]:
        sender = HttpxWebhookSender(
            timeout_s=settings.events.webhook_timeout_s,
            private_ok=settings.events.webhook_private_addresses,
            own_hosts=_listens_at(settings),
            instruments=instruments,
        )
        yield sender
        await sender.close()

    @provide
    def deliver(
        self,
        store: SqlaWebhookStore,
        log: SqlaJobEventLog,
        sender: HttpxWebhookSender,
        clock: Clock,
    ) -> DeliverWebhook:
        return DeliverWebhook(store, log, sender, clock)

    @provide
    def relay(
        self,
        engine: AsyncEngine,
        units: UnitOfWorkFactory,
        enqueue: EnqueueJob,
        store: SqlaWebhookStore,
        log: SqlaJobEventLog,
        clock: Clock,
        settings: Settings,
    ) -> WebhookRelay:
        return WebhookRelay(
            engine,
            units,
            enqueue,
            store,
            log,
            clock,
            interval_s=settings.events.poll_interval_ms / 1000,
        )
