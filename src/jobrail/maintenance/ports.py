"""What housekeeping needs of the database and the broker, as small roles."""

from collections.abc import Sequence
from datetime import datetime
from typing import Protocol

from jobrail.maintenance.sample import Sample


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


class OverviewSampleStore(Protocol):
    """The jobs as the console's overview samples them (jobrail.maintenance.sampling),
    and the samples kept. Every read of jobs is bounded by an index on the time it reads
    (finished_at, started_at) or on the jobs not ended yet."""

    async def finished_in(self, start: datetime, end: datetime) -> list[tuple[str, str, int]]:
        """(type, status, count) of the jobs that finished in [start, end)."""
        ...

    async def start_delays(self, start: datetime, end: datetime) -> list[float]:
        """For each job started in [start, end): seconds from when it could run (its
        run_after, else its creation) to its start."""
        ...

    async def waiting_by_queue(self) -> dict[str, int]:
        """Jobs pending or retrying, by queue."""
        ...

    async def newest_minute(self) -> datetime | None:
        """The newest minute sampled, or None."""
        ...

    async def replace(self, first: datetime, last: datetime, samples: Sequence[Sample]) -> None:
        """Replace the samples of the minutes from `first` to `last` with `samples`, in
        one transaction; the queue depths of the minutes before `last` stay (they cannot
        be sampled again)."""
        ...

    async def read(self, metrics: Sequence[str], since: datetime) -> list[Sample]:
        """The samples of `metrics` from `since` on."""
        ...

    async def finished_totals(self, since: datetime, until: datetime) -> dict[str, float]:
        """The finished counts of the minutes in [since, until), summed by label."""
        ...

    async def delete_before(self, cutoff: datetime) -> int:
        """Delete the samples of the minutes before `cutoff`; how many went."""
        ...
