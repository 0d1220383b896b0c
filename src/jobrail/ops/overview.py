"""What the ops page shows: the state of the whole platform, in one read."""

from dataclasses import dataclass
from datetime import timedelta

from jobrail.jobs.domain import Job
from jobrail.jobs.operator_reads import JobCount, OpsReadModel, QueueDepth, QueueStats
from jobrail.kernel.clock import Clock
from jobrail.kernel.errors import BrokerUnavailableError


@dataclass(frozen=True, slots=True)
class OpsOverview:
    counts: list[JobCount]
    queues: list[QueueDepth] | None
    """None when RabbitMQ could not be asked."""
    outbox_lag: timedelta
    """Age of the oldest outbox row not yet published (zero when none waits)."""
    failures: list[Job]


class GetOpsOverview:
    def __init__(self, reads: OpsReadModel, broker: QueueStats, clock: Clock) -> None:
        self._reads = reads
        self._broker = broker
        self._clock = clock

    async def __call__(self, failures: int = 20) -> OpsOverview:
        try:
            queues: list[QueueDepth] | None = await self._broker.queue_depths()
        except BrokerUnavailableError:
            queues = None
        oldest = await self._reads.oldest_unpublished()
        now = self._clock.now()
        return OpsOverview(
            counts=await self._reads.job_counts(),
            queues=queues,
            outbox_lag=max(now - oldest, timedelta(0)) if oldest else timedelta(0),
            failures=await self._reads.recent_failures(failures),
        )
