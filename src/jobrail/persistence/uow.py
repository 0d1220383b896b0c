from typing import Any, Self

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from jobrail.jobs.ports import OutboxDispatcher
from jobrail.kernel.clock import Clock
from jobrail.persistence.errors import database_errors
from jobrail.persistence.jobs import SqlaJobRepository
from jobrail.persistence.outbox import SqlaOutbox


class SqlaUnitOfWork:
    """One session, one transaction. Rolls back unless `commit()` is called; after the
    commit, the messages the transaction added to the outbox are dispatched."""

    jobs: SqlaJobRepository
    outbox: SqlaOutbox
    session: AsyncSession

    def __init__(
        self,
        sessionmaker: async_sessionmaker[AsyncSession],
        dispatcher: OutboxDispatcher,
        clock: Clock,
    ) -> None:
        self._sessionmaker = sessionmaker
        self._dispatcher = dispatcher
        self._clock = clock
        self.committed = False

    async def __aenter__(self) -> Self:
        self.session = self._sessionmaker()
        self.jobs = SqlaJobRepository(self.session)
        self.outbox = SqlaOutbox(self.session, self._clock)
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
        pending, self.outbox.pending = self.outbox.pending, []
        if pending:
            await self._dispatcher.dispatch(pending)
