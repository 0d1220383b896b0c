"""Enqueueing in a transaction, and what happens once it commits.

- ``AfterCommit`` is the one place where what a committed transaction enqueued
  leaves: its messages go to the outbox's fast path, its new jobs are counted.
  ``DetachedDispatch`` lets the committer go on while they are published.
- ``RecordingIntake`` and ``TransactionIntake`` note what a unit of work enqueued,
  for its commit.
- ``IntakeUnitOfWork`` is the unit of work of one statement that ``EnqueueJob`` uses
  on its own (routes, the scheduler).
- ``TransactionJobQueue``, ``TransactionWorkflows`` and ``OutboxEventPublisher`` are
  what a unit of work offers its use cases besides repositories: enqueueing jobs,
  starting batches and chains, and publishing integration events in the caller's
  transaction.
"""

import asyncio
import contextvars
import logging
import uuid
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, Self

from opentelemetry import trace

from jobrail.events.catalog import EventCatalog
from jobrail.jobs.domain import Job
from jobrail.jobs.enqueue import EnqueueJob, EnqueueJobCommand, EnqueueResult
from jobrail.jobs.intake import EnqueueCounter, EnqueueUnitOfWork, JobIntake
from jobrail.jobs.messages import JobMessage, Outgoing
from jobrail.jobs.ports import JobRepository, JobsUnitOfWork, Outbox
from jobrail.jobs.publishing import OutboxDispatcher
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


class AfterCommit:
    """Runs once a transaction that enqueued has committed: publishes its messages
    (the fast path; the relay publishes what it misses) and counts its new jobs."""

    def __init__(self, dispatcher: OutboxDispatcher, counter: EnqueueCounter | None = None) -> None:
        self._dispatcher = dispatcher
        self._counter = counter

    async def __call__(self, messages: Sequence[Outgoing], created: Sequence[str]) -> None:
        if self._counter is not None:
            for job_type in created:
                self._counter.enqueued(job_type)
        if messages:
            await self._dispatcher.dispatch(messages)


class DetachedDispatch:
    """The fast path without the committer waiting for it: `dispatch` starts publishing
    and returns. Once a transaction has committed, its jobs are durable and its outbox
    rows will be published (by this fast path, or by the relay if it fails or the
    process dies), so a route's 202 need not wait for the broker's confirms.

    The commits that end in one event-loop turn are handed over together: one task
    dispatches them all (``dispatch_each``: side by side, each commit's messages in
    order), instead of a task (and its coroutines and futures) per commit, which was a
    measurable part of the API's time per enqueue (bench/README.md).
    That task runs in a context of its own, so no request's log context rides along. A
    commit inside a sampled trace still gets a task of its own in its own context:
    its publish span then joins its trace (``jobrail.outbox.relay``).

    At most `max_in_flight` messages are under way detached; past that (the broker is
    slow or stalled) a dispatch waits for its publishes, which slows the committers
    down as an undetached fast path would. `drain` waits for the dispatches under way:
    the process calls it before it closes the broker."""

    def __init__(self, inner: OutboxDispatcher, max_in_flight: int = 1024) -> None:
        self._inner = inner
        self._max_in_flight = max_in_flight
        self._in_flight = 0
        self._pending: list[Sequence[Outgoing]] = []  # this turn's commits
        self._collecting = False
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def in_flight(self) -> int:
        """Messages handed over and not yet published (or given up on)."""
        return self._in_flight

    async def dispatch(self, messages: Sequence[Outgoing]) -> None:
        if not messages:
            return
        if self._in_flight >= self._max_in_flight:
            await self._inner.dispatch(messages)
            return
        self._in_flight += len(messages)
        if trace.get_current_span().get_span_context().trace_flags.sampled:
            self._start(self._send(list(messages)), None)
            return
        self._pending.append(messages)
        if not self._collecting:  # the turn's first: its task starts once the turn ends
            self._collecting = True
            self._start(self._send_pending(), contextvars.Context())

    async def dispatch_each(self, commits: Sequence[Sequence[Outgoing]]) -> None:
        for messages in commits:
            await self.dispatch(messages)

    def _start(self, send: Coroutine[Any, Any, None], ctx: contextvars.Context | None) -> None:
        task = asyncio.get_running_loop().create_task(send, context=ctx)
        self._tasks.add(task)
        task.add_done_callback(self._done)

    async def _send_pending(self) -> None:
        self._collecting = False
        commits, self._pending = self._pending, []
        try:
            await self._inner.dispatch_each(commits)
        finally:
            self._in_flight -= sum(len(messages) for messages in commits)

    async def _send(self, messages: list[Outgoing]) -> None:
        try:
            await self._inner.dispatch(messages)
        finally:
            self._in_flight -= len(messages)

    def _done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        # A dispatcher never raises (OutboxDispatcher); should one, nobody awaits this
        # task to hear it, so it is said here. Its rows are committed: the relay sends them.
        if not task.cancelled() and (exc := task.exception()) is not None:
            log.error("the fast path failed; the relay will publish its rows", exc_info=exc)

    async def drain(self) -> None:
        while self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)


class RecordingIntake:
    """Adds through `store` and notes what was new, for the commit: a new job's type
    (it is counted) and its message (it is dispatched)."""

    def __init__(self, store: JobIntake) -> None:
        self._store = store
        self.messages: list[Outgoing] = []
        self.created: list[str] = []

    async def add(self, job: Job, message: JobMessage) -> Job:
        stored = await self._store.add(job, message)
        if stored.id == job.id:  # otherwise an idempotent replay: nothing new to send
            self.created.append(job.type)
            self.messages.append(message)
        return stored

    def take(self) -> tuple[list[Outgoing], list[str]]:
        messages, self.messages = self.messages, []
        created, self.created = self.created, []
        return messages, created


class TransactionIntake:
    """The intake of a unit of work over repositories: the job through its
    repository, its message through its outbox (dispatched with the outbox's other
    messages after the commit), in the unit's transaction."""

    def __init__(self, jobs: JobRepository, outbox: Outbox) -> None:
        self._jobs = jobs
        self._outbox = outbox

    async def add(self, job: Job, message: JobMessage) -> Job:
        stored = await self._jobs.add(job)
        if stored.id == job.id:
            await self._outbox.add(message)
        return stored

    def take_created(self) -> Sequence[str]:
        """The jobs the repository created, these and any other (a batch's, a chain's):
        the repository is where every new job of the transaction is noted."""
        return self._jobs.take_created()


class IntakeUnitOfWork:
    """A unit of work of one statement: the store's `add` writes the job and its
    message atomically on its own (on Postgres in one statement, shared with the
    enqueues made at the same moment), so it is the commit point, and `commit` runs
    what follows a commit. It holds nothing else: a use case that writes more uses
    its context's unit of work and `EnqueueJob.into`."""

    def __init__(self, store: JobIntake, after_commit: AfterCommit) -> None:
        self._after_commit = after_commit
        self.intake = RecordingIntake(store)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        return None

    async def commit(self) -> None:
        await self._after_commit(*self.intake.take())


def intake_units(
    store: JobIntake, dispatcher: OutboxDispatcher, counter: EnqueueCounter | None = None
) -> Callable[[], IntakeUnitOfWork]:
    """Units of work of one statement over `store`, for `EnqueueJob`."""
    after_commit = AfterCommit(dispatcher, counter)
    return lambda: IntakeUnitOfWork(store, after_commit)


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
                )
            )
