"""Enqueueing in a transaction.

- ``TransactionJobQueue``, ``TransactionWorkflows`` and ``OutboxEventPublisher`` are
  what a unit of work offers its use cases besides repositories: enqueueing jobs,
  starting batches and chains, and publishing integration events in the caller's
  transaction (a unit of work, and what follows its commit, are
  ``jobrail.outbox.committing``'s).
"""

import logging
import uuid
from collections.abc import Sequence

from jobrail.events.catalog import EventCatalog
from jobrail.jobs.enqueue import EnqueueJob, EnqueueJobCommand, EnqueueResult
from jobrail.jobs.intake import EnqueueUnitOfWork
from jobrail.jobs.ports import JobsUnitOfWork
from jobrail.jobs.workflows import (
    BatchCommand,
    ChainCommand,
    FlowJob,
    FlowStarted,
    Workflows,
)
from jobrail.kernel.events import IntegrationEvent
from jobrail.kernel.ids import JobId, TenantId

log = logging.getLogger("jobrail.outbox")


class TransactionJobQueue:
    """Enqueue a job in an open unit of work (EnqueueJob's rules; the caller commits)."""

    def __init__(self, enqueue: EnqueueJob, uow: EnqueueUnitOfWork) -> None:
        self._enqueue = enqueue
        self._uow = uow

    async def enqueue(self, cmd: EnqueueJobCommand) -> EnqueueResult:
        return await self._enqueue.into(self._uow, cmd)


class TransactionWorkflows:
    """Start a batch or a chain in an open unit of work: its rows and first messages
    commit with the caller's other writes or not at all (the caller commits)."""

    def __init__(self, workflows: Workflows, uow: JobsUnitOfWork) -> None:
        self._workflows = workflows
        self._uow = uow

    async def batch(self, cmd: BatchCommand) -> FlowStarted:
        return await self._workflows.start_batch(self._uow, cmd)

    async def chain(self, cmd: ChainCommand) -> FlowStarted:
        return await self._workflows.start_chain(self._uow, cmd)

    async def add_to_batch(
        self, tenant_id: TenantId, batch_id: uuid.UUID, jobs: Sequence[FlowJob]
    ) -> list[JobId]:
        """Add members to the tenant's running batch (a job of the batch may add to it
        too): they count in its totals, and its callbacks wait for them. NotFoundError
        for no such batch of the tenant, ConflictError once it has finished or was
        cancelled."""
        added = await self._workflows.add_to_batch(self._uow, tenant_id, batch_id, jobs)
        return [job.id for job in added]


class OutboxEventPublisher:
    """Publishes an integration event as one job per consumer, in the caller's
    transaction. The job's idempotency key is the event id and the consumer, so
    publishing the same event twice records each consumer's job once."""

    def __init__(self, queue: TransactionJobQueue, events: EventCatalog) -> None:
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
                    capped=False,  # part of the business change: never refused alone
                )
            )
