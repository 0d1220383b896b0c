from typing import Any, Self, TypeVar

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from jobrail.jobs.events import EventCatalog
from jobrail.jobs.ports import EnqueueCounter, JobCatalog, OutboxDispatcher
from jobrail.jobs.transactional import OutboxEventPublisher, OutboxJobQueue
from jobrail.kernel.clock import Clock
from jobrail.persistence.errors import database_errors
from jobrail.persistence.inbox import SqlaInbox
from jobrail.persistence.jobs import SqlaJobRepository
from jobrail.persistence.outbox import SqlaOutbox

U = TypeVar("U", bound="SqlaUnitOfWork")


class SqlaUnitOfWork:
    """One session, one transaction. Rolls back unless `commit()` is called; after the
    commit, the messages the transaction added to the outbox are dispatched.

    Contexts extend it with their repositories on the same session, so that their
    changes, the jobs they enqueue and the events they publish commit together."""

    jobs: SqlaJobRepository
    outbox: SqlaOutbox
    inbox: SqlaInbox
    queue: OutboxJobQueue
    events: OutboxEventPublisher
    session: AsyncSession

    def __init__(
        self,
        sessionmaker: async_sessionmaker[AsyncSession],
        dispatcher: OutboxDispatcher,
        clock: Clock,
        event_catalog: EventCatalog,
        job_types: JobCatalog,
        default_max_attempts: int,
        enqueued: EnqueueCounter | None = None,
    ) -> None:
        self._sessionmaker = sessionmaker
        self._enqueued = enqueued
        self._dispatcher = dispatcher
        self._clock = clock
        self._event_catalog = event_catalog
        self._job_types = job_types
        self._default_max_attempts = default_max_attempts
        self.committed = False

    async def __aenter__(self) -> Self:
        self.session = self._sessionmaker()
        self.jobs = SqlaJobRepository(self.session)
        self.outbox = SqlaOutbox(self.session, self._clock)
        self.inbox = SqlaInbox(self.session, self._clock)
        self.queue = OutboxJobQueue(
            self.jobs, self.outbox, self._job_types, self._clock, self._default_max_attempts
        )
        self.events = OutboxEventPublisher(self.queue, self._event_catalog)
        self.committed = False
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        try:
            if not self.committed:
                await self.session.rollback()
        finally:
            await self.session.close()

    async def commit(self) -> None:
        with database_errors():
            await self.session.commit()
        self.committed = True
        created, self.queue.created = self.queue.created, []
        if self._enqueued is not None:
            for job_type in created:
                self._enqueued.enqueued(job_type)
        pending, self.outbox.pending = self.outbox.pending, []
        if pending:
            await self._dispatcher.dispatch(pending)


class UnitOfWorkFactory:
    """Makes units of work (the platform's or a context's subclass) with the shared wiring."""

    def __init__(
        self,
        sessionmaker: async_sessionmaker[AsyncSession],
        dispatcher: OutboxDispatcher,
        clock: Clock,
        event_catalog: EventCatalog,
        job_types: JobCatalog,
        default_max_attempts: int,
        enqueued: EnqueueCounter | None = None,
    ) -> None:
        self._args = (
            sessionmaker,
            dispatcher,
            clock,
            event_catalog,
            job_types,
            default_max_attempts,
            enqueued,
        )

    def __call__(self, kind: type[U]) -> U:
        return kind(*self._args)
