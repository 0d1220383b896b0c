"""What the ops page shows: the state of the whole platform, in one read, and the last
hour minute by minute.

Every read is bounded by an index, none reads the whole jobs table: the jobs not ended
yet through ``ix_jobs_live``; what ended in the last day, and the charts' hour, from the
samples housekeeping writes each minute (jobrail.maintenance.sampling); the minutes since
its last sample (a few at most) from the jobs finished and started in them, as the
sampler reads them. The console keeps the result a few seconds (jobrail.ops.cache)."""

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta

from jobrail.jobs.domain import Job, JobStatus
from jobrail.jobs.operator_reads import JobCount, OpsReadModel, QueueDepth, QueueStats
from jobrail.kernel.clock import Clock
from jobrail.kernel.errors import BrokerUnavailableError
from jobrail.maintenance.ports import OverviewSampleStore
from jobrail.maintenance.sample import (
    FINISHED,
    MINUTE,
    START_P50,
    START_P95,
    WAITING,
    Sample,
    floor_minute,
    split_label,
)
from jobrail.maintenance.sampling import KEEP, sample_minutes

WINDOW_MINUTES = 60
_STATUSES = {status.value for status in JobStatus}
LIVE_MINUTES = 5
"""At most this many of the last minutes are read from the jobs (when housekeeping has not
sampled them yet); any older minute not sampled shows empty."""


@dataclass(frozen=True, slots=True)
class Timeline:
    """The last hour, one value per minute, the oldest first."""

    minutes: list[datetime]
    finished: list[int]
    failed: list[int]
    start_p50: list[float | None]
    start_p95: list[float | None]
    """Seconds from when a job could run to its start; None: none started."""
    waiting: dict[str, list[float | None]]
    """Jobs pending or retrying, by queue; None: not sampled that minute."""


@dataclass(frozen=True, slots=True)
class OpsOverview:
    counts: list[JobCount]
    """Jobs not ended, by type and status, now; ended ones in the last day."""
    queues: list[QueueDepth] | None
    """None when RabbitMQ could not be asked."""
    outbox_lag: timedelta
    """Age of the oldest outbox row not yet published (zero when none waits)."""
    failures: list[Job]
    timeline: Timeline


class GetOpsOverview:
    def __init__(
        self,
        reads: OpsReadModel,
        broker: QueueStats,
        clock: Clock,
        samples: OverviewSampleStore,
    ) -> None:
        self._reads = reads
        self._broker = broker
        self._clock = clock
        self._samples = samples
        self._ended: tuple[datetime, dict[str, float]] | None = None

    async def __call__(self, failures: int = 20) -> OpsOverview:
        try:
            queues: list[QueueDepth] | None = await self._broker.queue_depths()
        except BrokerUnavailableError:
            queues = None
        oldest = await self._reads.oldest_unpublished()
        now = self._clock.now()
        current = floor_minute(now)
        newest = await self._samples.newest_minute()
        live_from = current - (LIVE_MINUTES - 1) * MINUTE
        if newest is not None and newest > live_from:
            live_from = newest  # it may have been sampled while it went on: read it again
        live = await sample_minutes(self._samples, live_from, current)
        first = current - (WINDOW_MINUTES - 1) * MINUTE
        kept = await self._samples.read([FINISHED, START_P50, START_P95, WAITING], first)
        waiting_now = await self._samples.waiting_by_queue()
        samples = [s for s in kept if s.minute < live_from or s.metric == WAITING]
        samples = [s for s in samples if not (s.metric == WAITING and s.minute == current)]
        samples += live
        samples += [Sample(WAITING, current, queue, n) for queue, n in waiting_now.items()]
        ended = dict(await self._ended_before(live_from))
        for sample in live:
            if sample.metric == FINISHED:
                ended[sample.label] = ended.get(sample.label, 0) + sample.value
        return OpsOverview(
            counts=_counts(await self._reads.job_counts(), ended),
            queues=queues,
            outbox_lag=max(now - oldest, timedelta(0)) if oldest else timedelta(0),
            failures=await self._reads.recent_failures(failures),
            timeline=_timeline(first, samples),
        )

    async def _ended_before(self, live_from: datetime) -> dict[str, float]:
        """The jobs ended in the day before `live_from`, by type and status, from the
        samples. Those minutes are sampled for good, so the sum (a day of samples) is
        read again only when `live_from` moves: once a minute, not once per refresh."""
        if self._ended is None or self._ended[0] != live_from:
            totals = await self._samples.finished_totals(live_from - KEEP, live_from)
            self._ended = (live_from, totals)
        return self._ended[1]


def _counts(live: list[JobCount], ended: dict[str, float]) -> list[JobCount]:
    counts = list(live)
    for label, total in ended.items():
        job_type, status = split_label(label)
        if total and status in _STATUSES:
            counts.append(JobCount(job_type, JobStatus(status), int(total)))
    return sorted(counts, key=lambda c: (c.type, c.status.value))


def _timeline(first: datetime, samples: list[Sample]) -> Timeline:
    minutes = [first + i * MINUTE for i in range(WINDOW_MINUTES)]
    at = {minute: i for i, minute in enumerate(minutes)}
    finished = [0] * WINDOW_MINUTES
    failed = [0] * WINDOW_MINUTES
    p50: list[float | None] = [None] * WINDOW_MINUTES
    p95: list[float | None] = [None] * WINDOW_MINUTES
    waiting: dict[str, list[float | None]] = defaultdict(lambda: [None] * WINDOW_MINUTES)
    for sample in samples:
        i = at.get(sample.minute)
        if i is None:
            continue
        if sample.metric == FINISHED:
            finished[i] += int(sample.value)
            if split_label(sample.label)[1] == JobStatus.FAILED.value:
                failed[i] += int(sample.value)
        elif sample.metric == START_P50:
            p50[i] = sample.value
        elif sample.metric == START_P95:
            p95[i] = sample.value
        elif sample.metric == WAITING:
            waiting[sample.label][i] = sample.value
    return Timeline(minutes, finished, failed, p50, p95, dict(sorted(waiting.items())))
