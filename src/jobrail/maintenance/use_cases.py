"""The platform's housekeeping, one use case each. The scheduler enqueues them as jobs
(jobrail.maintenance's schedules), so they run on a worker, retry like any job and show
in the jobs table."""

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from jobrail.kernel.clock import Clock
from jobrail.kernel.errors import BrokerUnavailableError, TransientError
from jobrail.maintenance.ports import (
    FinishedFlows,
    FinishedJobs,
    OutboxBacklog,
    PastEvents,
    ProcessedInbox,
    PublishedOutbox,
    QueueStats,
)

log = logging.getLogger("jobrail.maintenance")


@dataclass(frozen=True, slots=True)
class Pruned:
    deleted: int
    finished_before: datetime
    flows_deleted: int = 0


class PruneFinishedJobs:
    """Delete the jobs that finished (succeeded, failed, cancelled) more than `keep` ago,
    then the batches and chains (`flows`) that finished as long ago and have no job left.

    - Unfinished jobs stay, however old; so do running flows, and a finished flow while
      any of its jobs is still kept (it goes on a later run).
    - Deletes in batches of `batch`, each its own short transaction, so a large backlog
      never holds many row locks for long; stops at the first short batch.
    """

    def __init__(
        self,
        jobs: FinishedJobs,
        clock: Clock,
        keep: timedelta,
        batch: int = 1000,
        flows: FinishedFlows | None = None,
    ) -> None:
        self._jobs = jobs
        self._flows = flows
        self._clock = clock
        self._keep = keep
        self._batch = batch

    async def __call__(self) -> Pruned:
        cutoff = self._clock.now() - self._keep
        deleted = await _in_batches(self._jobs.delete_finished_before, cutoff, self._batch)
        flows = 0
        if self._flows is not None:
            flows = await _in_batches(self._flows.delete_finished_before, cutoff, self._batch)
        log.info(
            "pruned %d finished jobs and %d finished batches and chains",
            deleted,
            flows,
            extra={"deleted": deleted, "flows_deleted": flows, "before": cutoff},
        )
        return Pruned(deleted=deleted, finished_before=cutoff, flows_deleted=flows)


async def _in_batches(
    delete: Callable[[datetime, int], Awaitable[int]], cutoff: datetime, batch: int
) -> int:
    """Delete batch after batch until one comes back short; return how many went."""
    deleted = 0
    while True:
        count = await delete(cutoff, batch)
        deleted += count
        if count < batch:
            return deleted


@dataclass(frozen=True, slots=True)
class PrunedMessages:
    outbox_deleted: int
    published_before: datetime
    inbox_deleted: int
    taken_before: datetime
    events_deleted: int = 0


class PruneMessages:
    """Delete the message bookkeeping nobody needs any more, in batches like
    `PruneFinishedJobs`:

    - outbox rows published more than `keep_outbox` ago (one per enqueue, retry, deferral
      and dead letter: the broker has them). A row not yet published stays, however
      old: it is a message the relay still owes.
    - inbox rows whose message was last taken more than `keep_inbox` ago. That must be
      longer than finished jobs are kept, or a failed job redriven late would take its
      event again as new (see SchedulerSettings._inbox_outlives_jobs).
    - job events (the event feed) that happened more than `keep_events` ago.
    """

    def __init__(
        self,
        outbox: PublishedOutbox,
        inbox: ProcessedInbox,
        clock: Clock,
        *,
        keep_outbox: timedelta,
        keep_inbox: timedelta,
        events: PastEvents | None = None,
        keep_events: timedelta = timedelta(days=7),
        batch: int = 1000,
    ) -> None:
        self._outbox = outbox
        self._inbox = inbox
        self._events = events
        self._keep_events = keep_events
        self._clock = clock
        self._keep_outbox = keep_outbox
        self._keep_inbox = keep_inbox
        self._batch = batch

    async def __call__(self) -> PrunedMessages:
        now = self._clock.now()
        published_before = now - self._keep_outbox
        taken_before = now - self._keep_inbox
        outbox_deleted = await _in_batches(
            self._outbox.delete_published_before, published_before, self._batch
        )
        inbox_deleted = await _in_batches(
            self._inbox.delete_processed_before, taken_before, self._batch
        )
        events_deleted = 0
        if self._events is not None:
            events_deleted = await _in_batches(
                self._events.delete_before, now - self._keep_events, self._batch
            )
        log.info(
            "pruned %d published outbox rows, %d inbox rows and %d job events",
            outbox_deleted,
            inbox_deleted,
            events_deleted,
            extra={
                "outbox_deleted": outbox_deleted,
                "inbox_deleted": inbox_deleted,
                "events_deleted": events_deleted,
            },
        )
        return PrunedMessages(
            outbox_deleted, published_before, inbox_deleted, taken_before, events_deleted
        )


@dataclass(frozen=True, slots=True)
class OutboxLag:
    lag_s: float
    """Age of the oldest unpublished outbox row; 0 when every row is published."""
    lagging: bool


class CheckOutboxLag:
    """Warn when the oldest unpublished outbox row is older than `threshold`: the fast
    path and the relay both failed to publish it (RabbitMQ down, no worker running the
    relay), so jobs wait that long before any worker sees them."""

    def __init__(self, backlog: OutboxBacklog, clock: Clock, threshold: timedelta) -> None:
        self._backlog = backlog
        self._clock = clock
        self._threshold = threshold

    async def __call__(self) -> OutboxLag:
        oldest = await self._backlog.oldest_unpublished()
        lag = max(self._clock.now() - oldest, timedelta(0)) if oldest else timedelta(0)
        lagging = lag > self._threshold
        if lagging:
            log.warning(
                "outbox lag: the oldest unpublished message is %.0fs old (threshold %.0fs)",
                lag.total_seconds(),
                self._threshold.total_seconds(),
                extra={"outbox_lag_s": lag.total_seconds()},
            )
        return OutboxLag(lag_s=lag.total_seconds(), lagging=lagging)


class ReportDeadLetters:
    """Log how many messages wait in the dead-letter queue: a warning when any do (each
    is a failed job or a poison message an operator should look at), info otherwise."""

    def __init__(self, broker: QueueStats, dead_letter_queue: str) -> None:
        self._broker = broker
        self._dead_letter_queue = dead_letter_queue

    async def __call__(self) -> int:
        try:
            depths = await self._broker.queue_depths()
        except BrokerUnavailableError as exc:
            raise TransientError(f"cannot read the queue depths: {exc}") from exc
        waiting = sum(d.ready for d in depths if d.queue == self._dead_letter_queue)
        level = logging.WARNING if waiting else logging.INFO
        log.log(
            level,
            "%d messages wait in %s",
            waiting,
            self._dead_letter_queue,
            extra={"dead_letters": waiting},
        )
        return waiting
