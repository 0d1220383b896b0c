"""The unit of work on a session of its own: ``SqlaUnitOfWork``, the base of the contexts'
units, and ``UnitOfWorkFactory``, which makes them. It is ``outbox.committing.UnitOfWork``
with the session's repositories, committed by ``SessionCommit``."""

from typing import Self, TypeVar

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from jobrail.events.catalog import EventCatalog
from jobrail.jobs.enqueue import EnqueueJob
from jobrail.jobs.intake import EnqueueCounter, JobCatalog
from jobrail.jobs.priority import LineRules
from jobrail.jobs.workflows import Workflows
from jobrail.kernel.clock import Clock
from jobrail.outbox.committing import (
    AfterCommit,
    Dispatcher,
    Recorder,
    TransactionIntake,
    UnitOfWork,
)
from jobrail.outbox.inbox import SqlaInbox
from jobrail.outbox.relay import SqlaOutbox
from jobrail.outbox.transactional import (
    OutboxEventPublisher,
    TransactionJobQueue,
    TransactionWorkflows,
)
from jobrail.store.errors import database_errors
from jobrail.store.flows import SqlaFlowRepository
from jobrail.store.jobs import SqlaJobRepository
from jobrail.transport.codec import Envelope

U = TypeVar("U", bound="SqlaUnitOfWork")


class SessionCommit:
    """Who commits in a unit on a session of its own: the unit. `commit` commits the
    session, then hands over; a unit left without a commit rolls it back; either way
    the session is closed."""

    def __init__(self, session: AsyncSession, after_commit: AfterCommit) -> None:
        self._session = session
        self._after_commit = after_commit
        self.committed = False

    async def commit(self, recorded: Recorder) -> None:
        with database_errors():
            await self._session.commit()
        self.committed = True
        await self._after_commit(*recorded.take())

    async def end(self) -> None:
        try:
            if not self.committed:
                await self._session.rollback()
        finally:
            await self._session.close()


class SqlaUnitOfWork(UnitOfWork):
    """One session, one transaction. Rolls back unless `commit()` is called; after the
    commit, AfterCommit dispatches the messages the transaction added to the outbox
    and counts the jobs it created (every one its job repository inserted: enqueued,
    delivering an event, or a batch's or chain's).

    Contexts extend it with their repositories on the same session, so that their
    changes, the jobs they enqueue and the events they publish commit together."""

    jobs: SqlaJobRepository
    outbox: SqlaOutbox
    flows: SqlaFlowRepository
    inbox: SqlaInbox
    intake: TransactionIntake
    queue: TransactionJobQueue
    workflows: TransactionWorkflows
    events: OutboxEventPublisher
    session: AsyncSession

    def __init__(
        self,
        sessionmaker: async_sessionmaker[AsyncSession],
        after_commit: AfterCommit,
        clock: Clock,
        event_catalog: EventCatalog,
        enqueue: EnqueueJob,
        workflows: Workflows,
    ) -> None:
        # Not UnitOfWork's __init__: its intake and committer are made when it is
        # entered, on the session it opens then.
        self._sessionmaker = sessionmaker
        self._after_commit = after_commit
        self._clock = clock
        self._event_catalog = event_catalog
        self._enqueue = enqueue
        self._workflows = workflows
        self._session_commit: SessionCommit | None = None

    @property
    def committed(self) -> bool:
        return self._session_commit is not None and self._session_commit.committed

    async def __aenter__(self) -> Self:
        self.session = self._sessionmaker()
        self.jobs = SqlaJobRepository(self.session)
        self.outbox = SqlaOutbox(self.session, self._clock)
        self.flows = SqlaFlowRepository(self.session)
        self.inbox = SqlaInbox(self.session, self._clock)
        self.intake = TransactionIntake(self.jobs, self.outbox)
        self.queue = TransactionJobQueue(self._enqueue, self)
        self.workflows = TransactionWorkflows(self._workflows, self)
        self.events = OutboxEventPublisher(self.queue, self._event_catalog)
        self._committer = self._session_commit = SessionCommit(self.session, self._after_commit)
        return self


class UnitOfWorkFactory:
    """Makes units of work (the platform's or a context's subclass) with the shared
    wiring: one AfterCommit, and an EnqueueJob whose own transactions are units of
    work of this factory."""

    def __init__(
        self,
        sessionmaker: async_sessionmaker[AsyncSession],
        dispatcher: Dispatcher[Envelope],
        clock: Clock,
        event_catalog: EventCatalog,
        job_types: JobCatalog,
        default_max_attempts: int,
        enqueued: EnqueueCounter | None = None,
        after_commit: AfterCommit | None = None,
        *,
        hold: LineRules | None = None,
    ) -> None:
        """`after_commit`: the process's one AfterCommit (the composition root's), else
        one over `dispatcher` and `enqueued`. `hold`: as EnqueueJob's."""
        enqueue = EnqueueJob(
            lambda: self(SqlaUnitOfWork), job_types, clock, default_max_attempts, hold=hold
        )
        self.workflows = Workflows(job_types, clock, default_max_attempts)
        self._args = (
            sessionmaker,
            after_commit or AfterCommit(dispatcher, enqueued),
            clock,
            event_catalog,
            enqueue,
            self.workflows,
        )

    def __call__(self, kind: type[U]) -> U:
        return kind(*self._args)
