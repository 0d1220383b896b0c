"""Enqueueing in a SQLAlchemy ``AsyncSession`` the host owns.

The job row and its outbox row are written in the session's open transaction, so they
commit with the host's own writes or not at all. What the transaction enqueued leaves
only once it has committed: SQLAlchemy's ``after_commit`` event hands it to
``AfterCommit`` (the outbox's fast path; the relay publishes whatever that misses). A
rollback, of the whole transaction or of the savepoint the job was enqueued in, drops
it, as does a session closed without a commit.
"""

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Session, SessionTransaction

from jobrail.kernel.clock import Clock
from jobrail.outbox.committing import AfterCommit, Recorder, TransactionIntake, UnitOfWork
from jobrail.outbox.relay import SqlaOutbox
from jobrail.store.jobs import SqlaJobRepository
from jobrail.transport.codec import Envelope

_KEY = "jobrail.after_commit"


def host_session_unit(
    session: AsyncSession,
    clock: Clock,
    hooks: "SessionHooks",
    schema: str | None = None,
) -> UnitOfWork:
    """A unit of work over the host's session: ``EnqueueJob.into`` records in it, and
    its `commit` only hands what it recorded to the session's commit, which the host
    makes (or not).

    The host's connections do not put the platform's `schema` on their search path: the
    statements it runs in the session name its tables in that schema."""
    intake = TransactionIntake(
        SqlaJobRepository(session, schema), SqlaOutbox(session, clock, schema)
    )
    return UnitOfWork(intake, HostSessionCommit(session, hooks))


class HostSessionCommit:
    """Who commits in a unit over the host's session: the host. The unit's `commit`
    holds what it recorded in `hooks` until the session's transaction ends."""

    def __init__(self, session: AsyncSession, hooks: "SessionHooks") -> None:
        self._session = session
        self._hooks = hooks

    async def commit(self, recorded: Recorder) -> None:
        self._hooks.hold(self._session, *recorded.take())

    async def end(self) -> None:
        return None


@dataclass(slots=True)
class _Held:
    transaction: SessionTransaction
    messages: Sequence[Envelope]
    created: Sequence[str]


class SessionHooks:
    """Holds what each host session enqueued until its transaction ends; dispatches it
    after a commit (in a task of the running loop: the event is synchronous) and drops
    it otherwise. ``drain`` waits for the dispatches still under way."""

    def __init__(self, after_commit: AfterCommit) -> None:
        self._after_commit = after_commit
        self._tasks: set[asyncio.Task[None]] = set()

    def hold(
        self, session: AsyncSession, messages: Sequence[Envelope], created: Sequence[str]
    ) -> None:
        if not messages and not created:
            return
        sync = session.sync_session
        transaction = sync.get_nested_transaction() or sync.get_transaction()
        assert transaction is not None  # the enqueue's statements began one
        self._held(sync).append(_Held(transaction, messages, created))

    async def drain(self) -> None:
        while self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    def _held(self, sync: Session) -> list[_Held]:
        held: list[_Held] | None = sync.info.get(_KEY)
        if held is None:
            held = sync.info[_KEY] = []
            event.listen(sync, "after_commit", self._committed)
            event.listen(sync, "after_soft_rollback", self._rolled_back)
            event.listen(sync, "after_transaction_end", self._ended)
        return held

    def _committed(self, sync: Session) -> None:
        held: list[_Held] = sync.info.get(_KEY, [])
        if not held:
            return
        messages = [message for entry in held for message in entry.messages]
        created = [job_type for entry in held for job_type in entry.created]
        held.clear()
        task = asyncio.get_running_loop().create_task(self._after_commit(messages, created))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _rolled_back(self, sync: Session, previous: SessionTransaction) -> None:
        held: list[_Held] = sync.info.get(_KEY, [])
        if previous.nested:
            held[:] = [entry for entry in held if not _within(entry.transaction, previous)]
        elif previous.parent is None:
            held.clear()

    def _ended(self, sync: Session, transaction: SessionTransaction) -> None:
        if transaction.parent is None:  # the session's transaction, not a savepoint
            held: list[_Held] = sync.info.get(_KEY, [])
            held.clear()


def _within(transaction: SessionTransaction | None, ancestor: SessionTransaction) -> bool:
    while transaction is not None:
        if transaction is ancestor:
            return True
        transaction = transaction.parent
    return False
