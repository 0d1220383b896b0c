import os
import socket
import uuid

from dishka import AnyOf, Provider, Scope, provide
from sqlalchemy.ext.asyncio import AsyncEngine

from jobrail.dispatch.pauses import Pauses
from jobrail.dispatch.ports import Sender
from jobrail.dispatch.use_cases import JobDispatcher
from jobrail.jobs.intake import JobCatalog
from jobrail.jobs.ports import LinePlaces, PauseReader
from jobrail.kernel.clock import Clock
from jobrail.settings import Settings
from jobrail.store.dispatch import SqlaDispatchStore
from jobrail.store.pauses import SqlaPauses
from jobrail.store.places import SqlaLinePlaces
from jobrail.transport.brokers import JobBroker
from jobrail.transport.codec import MessagePublisher


class DispatchProvider(Provider):
    scope = Scope.APP

    @provide
    def pause_store(self, engine: AsyncEngine) -> AnyOf[SqlaPauses, PauseReader]:
        return SqlaPauses(engine)

    @provide
    def line_places(self, engine: AsyncEngine) -> LinePlaces:
        return SqlaLinePlaces(engine)

    @provide
    def pauses(
        self, store: SqlaPauses, clock: Clock, catalog: JobCatalog, settings: Settings
    ) -> Pauses:
        return Pauses(store, clock, settings.rabbit.queues, catalog)

    @provide
    def dispatcher(
        self,
        engine: AsyncEngine,
        broker: JobBroker,
        catalog: JobCatalog,
        clock: Clock,
        settings: Settings,
    ) -> JobDispatcher:
        return job_dispatcher(engine, broker, catalog, clock, settings, MessagePublisher(broker))


def job_dispatcher(
    engine: AsyncEngine,
    broker: JobBroker,
    catalog: JobCatalog,
    clock: Clock,
    settings: Settings,
    sender: Sender,
) -> JobDispatcher:
    """The process's dispatcher, publishing through `sender`."""
    # Names this process in dispatch_queues.holder (for an operator reading it).
    holder = f"{socket.gethostname()[:80]}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
    return JobDispatcher(
        SqlaDispatchStore(engine),
        broker,
        sender,
        catalog,
        clock,
        settings.dispatch,
        settings.rabbit.queues,
        holder,
        # The embedded broker is this process's memory: see jobrail.dispatch.use_cases.
        send_after_commit=settings.embedded,
    )
