from sqlalchemy.ext.asyncio import AsyncSession

from jobrail.kernel.clock import Clock
from jobrail.persistence.dialects import upsert_insert
from jobrail.persistence.errors import database_errors
from jobrail.persistence.tables import inbox


class SqlaInbox:
    """Consumer-side deduplication: one row per (consumer, message id), ever."""

    def __init__(self, session: AsyncSession, clock: Clock) -> None:
        self._session = session
        self._clock = clock

    async def accept(self, consumer: str, message_id: str) -> bool:
        statement = (
            upsert_insert(self._session.get_bind().dialect.name, inbox)
            .values(consumer=consumer, message_id=message_id, processed_at=self._clock.now())
            .on_conflict_do_nothing(index_elements=["consumer", "message_id"])
            .returning(inbox.c.message_id)
        )
        with database_errors():
            inserted = (await self._session.execute(statement)).scalar_one_or_none()
        return inserted is not None
