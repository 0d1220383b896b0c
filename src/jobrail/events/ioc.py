"""The events room's dishka provider: the job event log and the feed every event
stream follows."""

from collections.abc import AsyncIterator

from dishka import Provider, Scope, provide
from sqlalchemy.ext.asyncio import AsyncEngine

from jobrail.events.persistence import SqlaJobEventLog
from jobrail.events.use_cases import JobEvents
from jobrail.settings import Settings


class EventsProvider(Provider):
    @provide(scope=Scope.APP)
    def event_log(self, engine: AsyncEngine) -> SqlaJobEventLog:
        return SqlaJobEventLog(engine)

    @provide(scope=Scope.APP)
    async def job_events(
        self, log: SqlaJobEventLog, settings: Settings
    ) -> AsyncIterator[JobEvents]:
        feed = JobEvents(
            log,
            poll_interval_s=settings.events.poll_interval_ms / 1000,
            max_streams_per_tenant=settings.events.max_streams_per_tenant,
            # Half the pool at most: the other requests keep the rest.
            max_reads=max(1, settings.database.pool_size // 2),
        )
        yield feed
        await feed.close()  # its watch stops before the engine goes
