"""What housekeeping needs of the database and the broker, as small roles."""

from collections.abc import Sequence
from datetime import datetime
from typing import Protocol


class FinishedJobs(Protocol):
    async def delete_finished_before(self, cutoff: datetime, limit: int) -> int:
        """Delete up to `limit` succeeded, failed or cancelled jobs that finished before
        `cutoff`, in one short transaction; return how many went."""
        ...


class FinishedFlows(Protocol):
    async def delete_finished_before(self, cutoff: datetime, limit: int) -> int:
        """Delete up to `limit` batches and chains that finished before `cutoff` and
        have no job left (their members and callbacks pruned already), in one short
        transaction; return how many went."""
        ...


class PublishedOutbox(Protocol):
    async def delete_published_before(self, cutoff: datetime, limit: int) -> int:
        """Delete up to `limit` outbox rows published before `cutoff` (never one still
        waiting to be published), in one short transaction; return how many went."""
        ...


class PastEvents(Protocol):
    async def delete_before(self, cutoff: datetime, batch: int) -> int:
        """Delete up to `batch` job events that happened before `cutoff`, oldest first;
        fewer than `batch` when none older is left."""
        ...


class ProcessedInbox(Protocol):
    async def delete_processed_before(self, cutoff: datetime, limit: int) -> int:
        """Delete up to `limit` inbox rows last taken before `cutoff`, in one short
        transaction; return how many went."""
        ...


class OutboxBacklog(Protocol):
    async def oldest_unpublished(self) -> datetime | None:
        """When the oldest outbox row still waiting to be published was written."""
        ...


class QueueDepthReading(Protocol):
    @property
    def queue(self) -> str: ...

    @property
    def ready(self) -> int: ...


class QueueStats(Protocol):
    async def queue_depths(self) -> Sequence[QueueDepthReading]:
        """Ready messages of every work queue and of the dead-letter queue; raises
        BrokerUnavailableError when the broker cannot be asked."""
        ...
