from sqlalchemy import update
from sqlalchemy.ext.asyncio import AsyncSession

from jobrail.kernel.clock import Clock
from jobrail.store.dialects import upsert_insert
from jobrail.store.errors import database_errors
from jobrail.store.tables import inbox


class SqlaInbox:
    """Consumer-side deduplication: one row per (consumer, message id).

    ``processed_at`` is the last time the consumer took the message, the first time or
    as a duplicate: a duplicate renews it. Rows are pruned some time after that
    (``JOBRAIL_SCHEDULER__INBOX_KEEP_DAYS``, see jobrail.maintenance), so a message
    that keeps coming back (a failed job redriven now and then) keeps its row.
    """

    def __init__(self, session: AsyncSession, clock: Clock) -> None:
        self._session = session
        self._clock = clock

    async def accept(self, consumer: str, message_id: str) -> bool:
        now = self._clock.now()
        statement = (
            upsert_insert(self._session.get_bind().dialect.name, inbox)
            .values(consumer=consumer, message_id=message_id, processed_at=now)
            .on_conflict_do_nothing(index_elements=["consumer", "message_id"])
            .returning(inbox.c.message_id)
        )
        with database_errors():
            inserted = (await self._session.execute(statement)).scalar_one_or_none()
            if inserted is None:
                # A second statement only for duplicates (rare): an upsert that updates
                # cannot tell an insert from an update on every backend.
                await self._session.execute(
                    update(inbox)
                    .where(inbox.c.consumer == consumer, inbox.c.message_id == message_id)
                    .values(processed_at=now)
                )
        return inserted is not None
