"""The unit of work, and what happens once a transaction that enqueued commits.

- ``UnitOfWork`` is the one unit of work: a transaction that jobs and their messages
  are recorded in, through its `intake`; its `commit` makes them durable, then hands
  them over. Its kinds differ only in who commits (a ``Committer``): the store's own
  statement (``StatementCommit``, the units ``EnqueueJob`` uses on its own: routes, the
  scheduler), a session of the unit's own (``outbox.uow.SqlaUnitOfWork``, the base of the
  contexts' units), or the host's session (``facade.host_session``).
- ``AfterCommit`` is the one place where what a committed transaction enqueued
  leaves: its messages go to the outbox's fast path, its new jobs are counted. A
  message is encoded once, for its outbox row, and that envelope is what leaves
  (``RecordingIntake`` encodes it; ``SqlaOutbox`` does for a session's rows).
  ``DetachedDispatch`` lets the committer go on while they are published.
"""

import asyncio
import contextvars
import logging
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, Generic, Protocol, Self, TypeVar

from opentelemetry import trace

from jobrail.jobs.domain import Job
from jobrail.jobs.intake import EnqueueCounter
from jobrail.jobs.messages import JobMessage
from jobrail.jobs.ports import JobRepository, Outbox
from jobrail.transport.codec import Envelope, encode

log = logging.getLogger("jobrail.outbox")

T = TypeVar("T")
T_contra = TypeVar("T_contra", contravariant=True)


class Dispatcher(Protocol[T_contra]):
    """The outbox's fast path over items of one kind (the encoded messages of
    ``AfterCommit``): see ``jobrail.jobs.publishing.OutboxDispatcher``."""

    async def dispatch(self, messages: Sequence[T_contra]) -> None: ...

    async def dispatch_each(self, commits: Sequence[Sequence[T_contra]]) -> None: ...


class EnvelopeStore(Protocol):
    """Where ``RecordingIntake`` adds a job and its encoded message, atomically (see
    ``jobrail.jobs.intake.JobIntake``): ``store.pg_intake.PgJobIntake``,
    ``store.jobs.SqlaJobIntake``."""

    async def add(self, job: Job, envelope: Envelope) -> Job: ...


class AfterCommit:
    """Runs once a transaction that enqueued has committed: publishes its messages
    (the fast path; the relay publishes what it misses) and counts its new jobs."""

    def __init__(
        self, dispatcher: Dispatcher[Envelope], counter: EnqueueCounter | None = None
    ) -> None:
        self._dispatcher = dispatcher
        self._counter = counter

    async def __call__(self, envelopes: Sequence[Envelope], created: Sequence[str]) -> None:
        if self._counter is not None:
            for job_type in created:
                self._counter.enqueued(job_type)
        if envelopes:
            await self._dispatcher.dispatch(envelopes)


class DetachedDispatch(Generic[T]):
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

    def __init__(self, inner: Dispatcher[T], max_in_flight: int = 1024) -> None:
        self._inner = inner
        self._max_in_flight = max_in_flight
        self._in_flight = 0
        self._pending: list[Sequence[T]] = []  # this turn's commits
        self._collecting = False
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def in_flight(self) -> int:
        """Messages handed over and not yet published (or given up on)."""
        return self._in_flight

    async def dispatch(self, messages: Sequence[T]) -> None:
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

    async def dispatch_each(self, commits: Sequence[Sequence[T]]) -> None:
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

    async def _send(self, messages: list[T]) -> None:
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


class Recorder(Protocol):
    """A unit of work's `intake` (a ``JobIntake``), which also notes, for the commit,
    what is new: the envelopes to dispatch and the types of the jobs created.
    ``RecordingIntake`` over a store of one statement, ``TransactionIntake`` over a
    session's repositories."""

    async def add(self, job: Job, message: JobMessage) -> Job: ...

    def take(self) -> tuple[Sequence[Envelope], Sequence[str]]:
        """What is new since the last call (an idempotent replay is not), and forget it."""
        ...


class Committer(Protocol):
    """Who makes a unit of work's writes durable, the one thing its kinds differ in."""

    async def commit(self, recorded: Recorder) -> None:
        """Make the unit's writes durable, then hand what `recorded` took note of to
        ``AfterCommit``; or, where someone else commits, see that it is handed over
        once they have."""
        ...

    async def end(self) -> None:
        """The unit is left, committed or not: drop what did not commit, and give back
        what the unit held."""
        ...


class UnitOfWork:
    """A transaction that jobs and their messages are recorded in (``EnqueueUnitOfWork``).
    `intake` records them; `commit` makes them durable and then hands the new messages
    to the outbox's fast path and counts the new jobs, in one place (``AfterCommit``).
    Nothing leaves, and nothing is counted, unless it commits. `committer` is who
    commits; recording and handing over are the same whoever it is.

    `commit` and `__aexit__` hand back the committer's coroutine rather than await it in
    one of their own: an enqueue on its own is the API's hot path, and its unit adds no
    coroutine to those of the store and ``AfterCommit``."""

    intake: Recorder
    _committer: Committer

    def __init__(self, intake: Recorder, committer: Committer) -> None:
        self.intake = intake
        self._committer = committer

    async def __aenter__(self) -> Self:
        return self

    def __aexit__(self, *exc_info: object) -> Coroutine[Any, Any, None]:
        return self._committer.end()

    def commit(self) -> Coroutine[Any, Any, None]:
        return self._committer.commit(self.intake)


class RecordingIntake:
    """The intake of a unit over a store of one statement: encodes the message, once,
    adds the job and that envelope through `store`, and notes what was new, for the
    commit: a new job's type (it is counted) and its envelope (it is dispatched as it
    was stored)."""

    def __init__(self, store: EnvelopeStore) -> None:
        self._store = store
        self.envelopes: list[Envelope] = []
        self.created: list[str] = []

    async def add(self, job: Job, message: JobMessage) -> Job:
        envelope = encode(message)
        stored = await self._store.add(job, envelope)
        if stored.id == job.id:  # otherwise an idempotent replay: nothing new to send
            self.created.append(job.type)
            if stored.held_since is None:  # a held job's message is the dispatcher's
                self.envelopes.append(envelope)
        return stored

    def take(self) -> tuple[list[Envelope], list[str]]:
        envelopes, self.envelopes = self.envelopes, []
        created, self.created = self.created, []
        return envelopes, created


class PendingOutbox(Outbox, Protocol):
    """An outbox that keeps, in `pending`, the envelopes of the rows it added for
    dispatch after the commit (``SqlaOutbox``)."""

    pending: list[Envelope]


class TransactionIntake:
    """The intake of a unit over a session's repositories: the job through its
    repository, its message through its outbox (dispatched with the outbox's other
    messages after the commit), in the unit's transaction."""

    def __init__(self, jobs: JobRepository, outbox: PendingOutbox) -> None:
        self._jobs = jobs
        self._outbox = outbox

    async def add(self, job: Job, message: JobMessage) -> Job:
        stored = await self._jobs.add(job)
        if stored.id == job.id and stored.held_since is None:
            await self._outbox.add(message)
        return stored

    def take(self) -> tuple[list[Envelope], Sequence[str]]:
        """Every message the outbox is to dispatch and every job the repository created,
        these and any other (a batch's, a chain's): the outbox and the repository are
        where every new one of the transaction is noted."""
        envelopes, self._outbox.pending = self._outbox.pending, []
        return envelopes, self._jobs.take_created()


class StatementCommit:
    """Who commits in a unit over a store whose `add` commits on its own (on Postgres in
    one statement, shared with the enqueues made at the same moment): that statement is
    the commit point, so the unit's `commit` only hands over. It holds nothing of a
    unit's: one serves them all. Such a unit holds nothing else either: a use case that
    writes more uses its context's unit of work and `EnqueueJob.into`."""

    def __init__(self, after_commit: AfterCommit) -> None:
        self._after_commit = after_commit

    def commit(self, recorded: Recorder) -> Coroutine[Any, Any, None]:
        # What was recorded is taken now, when `commit()` is called, not when it is
        # awaited: every caller awaits it at once. (Were one not to, its messages would
        # miss the fast path only: their rows are committed, and the relay sends them.)
        return self._after_commit(*recorded.take())

    async def end(self) -> None:
        return None


def statement_units(store: EnvelopeStore, after_commit: AfterCommit) -> Callable[[], UnitOfWork]:
    """Units of work of one statement over `store`, for `EnqueueJob`."""
    committer = StatementCommit(after_commit)
    return lambda: UnitOfWork(RecordingIntake(store), committer)


def intake_units(
    store: EnvelopeStore, dispatcher: Dispatcher[Envelope], counter: EnqueueCounter | None = None
) -> Callable[[], UnitOfWork]:
    """`statement_units` with an AfterCommit of their own, over `dispatcher` and `counter`."""
    return statement_units(store, AfterCommit(dispatcher, counter))
