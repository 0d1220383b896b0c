"""What a unit of work offers besides repositories: enqueueing jobs and publishing
integration events, both in the caller's transaction (through the outbox)."""

from jobrail.jobs.events import EventCatalog
from jobrail.jobs.ports import JobCatalog, JobRepository, Outbox
from jobrail.jobs.use_cases.enqueue import EnqueueJobCommand, EnqueueResult, record_job
from jobrail.kernel.clock import Clock
from jobrail.kernel.events import IntegrationEvent


class OutboxJobQueue:
    """Enqueue a job as part of the caller's transaction (see EnqueueJob for the rules)."""

    def __init__(
        self,
        jobs: JobRepository,
        outbox: Outbox,
        job_types: JobCatalog,
        clock: Clock,
        default_max_attempts: int,
    ) -> None:
        self._jobs = jobs
        self._outbox = outbox
        self._job_types = job_types
        self._clock = clock
        self._default_max_attempts = default_max_attempts
        self.created: list[str] = []
        """Types of the jobs this transaction created (idempotent replays excluded)."""

    async def enqueue(self, cmd: EnqueueJobCommand) -> EnqueueResult:
        result = await record_job(
            self._jobs,
            self._outbox,
            self._job_types,
            cmd,
            now=self._clock.now(),
            default_max_attempts=self._default_max_attempts,
        )
        if result.created:
            self.created.append(result.job.type)
        return result


class OutboxEventPublisher:
    """Publishes an integration event as one job per consumer, in the caller's
    transaction. The job's idempotency key is the event id and the consumer, so
    publishing the same event twice records each consumer's job once."""

    def __init__(self, queue: OutboxJobQueue, events: EventCatalog) -> None:
        self._queue = queue
        self._events = events

    async def publish(self, event: IntegrationEvent) -> None:
        spec = self._events.spec(event.name)
        delivery = self._events.delivery(event).model_dump(mode="json")
        for consumer in spec.consumers:
            await self._queue.enqueue(
                EnqueueJobCommand(
                    tenant_id=event.tenant_id,
                    type=consumer,
                    payload=delivery,
                    idempotency_key=f"event:{event.name}:{event.event_id}:{consumer}",
                )
            )
