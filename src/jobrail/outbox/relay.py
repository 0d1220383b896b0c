"""The transactional outbox: rows written with the business change, published after.

- ``SqlaOutbox`` adds rows inside a unit of work.
- ``OutboxPublisher`` is the fast path: right after a commit it publishes the new
  rows and marks them published.
- ``OutboxRelay`` publishes whatever the fast path missed (the broker was down, the
  process died between commit and publish). It runs in worker processes; several
  relays at once are safe because each batch is taken with FOR UPDATE SKIP LOCKED.
  It also sweeps leases: a job still "running" long after its lease ended lost both
  its worker and its message (an unexpected error, a message dropped by an
  operator), so the relay publishes it again and the next claim takes it over. And
  it expires the jobs still waiting when their deadline passes.

Each batch published is a span (``outbox publish``, ``outbox relay``). The messages
carry their job's trace context from the enqueue, so a worker's span joins the
enqueue's trace whichever path published the message.
"""

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from datetime import timedelta
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import SpanKind
from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, AsyncSession

from jobrail.jobs.enqueue import message_for
from jobrail.jobs.intake import JobCatalog
from jobrail.jobs.messages import Outgoing
from jobrail.jobs.publishing import OutboxMarks
from jobrail.kernel.batching import Coalescer
from jobrail.kernel.clock import Clock, sleep_unless
from jobrail.kernel.errors import BrokerUnavailableError, StoreUnavailableError
from jobrail.outbox.left_over import LeftToRelayLog
from jobrail.store.dialects import paused_job
from jobrail.store.errors import database_errors
from jobrail.store.mapping import job_from_row
from jobrail.store.outbox_rows import insert_outbox_rows
from jobrail.store.queries import EXPIRE_OVERDUE
from jobrail.store.tables import jobs, outbox
from jobrail.telemetry.propagation import AMQP_SEND
from jobrail.transport.codec import Envelope, EnvelopePublisher, encode

log = logging.getLogger("jobrail.outbox")
_tracer = trace.get_tracer("jobrail.outbox")


class SqlaOutbox:
    """`schema`: as SqlaJobRepository's."""

    def __init__(self, session: AsyncSession, clock: Clock, schema: str | None = None) -> None:
        self._session = session
        self._clock = clock
        self._schema = schema
        self.pending: list[Envelope] = []
        """The envelopes of the rows added to dispatch after the commit: each message is
        encoded once, for its row, and that envelope is what the fast path publishes."""

    async def add(self, message: Outgoing, *, dispatch: bool = True) -> None:
        envelope = encode(message)
        with database_errors():
            await insert_outbox_rows(self._session, [envelope], self._clock.now(), self._schema)
        if dispatch:
            self.pending.append(envelope)

    async def add_many(self, messages: Sequence[Outgoing]) -> None:
        if not messages:
            return
        envelopes = [encode(m) for m in messages]
        with database_errors():
            await insert_outbox_rows(self._session, envelopes, self._clock.now(), self._schema)
        self.pending.extend(envelopes)


class SqlaOutboxMarks:
    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine

    async def mark_published(self, ids: Sequence[Any], at: Any) -> None:
        with database_errors():
            async with self._engine.begin() as conn:
                await conn.execute(
                    update(outbox).where(outbox.c.id.in_(list(ids))).values(published_at=at)
                )


class OutboxPublisher:
    """Fast path: publish just-committed rows, then mark them published.

    The messages of one dispatch are published in order, stopping at the first that
    fails (the relay publishes the rest). Dispatches made in the same loop turn travel
    together: their messages are published side by side, their publisher confirms
    awaited together, and the rows they published are marked in one statement."""

    def __init__(
        self,
        marks: OutboxMarks,
        publisher: EnvelopePublisher,
        clock: Clock,
        timeout: timedelta,
    ) -> None:
        self._marks = marks
        self._publisher = publisher
        self._clock = clock
        self._timeout = timeout.total_seconds()
        self._batches: Coalescer[Sequence[Envelope], list[Any]] = Coalescer(self._publish_many)
        self._left_over = LeftToRelayLog()
        self.envelopes = EnvelopeDispatch(self)
        """The fast path for messages already encoded (what ``AfterCommit`` hands on)."""

    async def dispatch(self, messages: Sequence[Outgoing]) -> None:
        await self.dispatch_envelopes([encode(message) for message in messages])

    async def dispatch_each(self, commits: Sequence[Sequence[Outgoing]]) -> None:
        await self.dispatch_each_envelopes([[encode(m) for m in messages] for messages in commits])

    async def dispatch_envelopes(self, envelopes: Sequence[Envelope]) -> None:
        if envelopes:
            await self._traced(len(envelopes), self._submit_counted(envelopes))

    async def dispatch_each_envelopes(self, commits: Sequence[Sequence[Envelope]]) -> None:
        """The commits' envelopes as one batch of dispatches (the caller collected them:
        ``outbox.committing.DetachedDispatch``), without waiting for the loop turn."""
        batches = [envelopes for envelopes in commits if envelopes]
        if batches:
            await self._traced(sum(len(b) for b in batches), self._publish_counted(batches))

    async def _traced(self, count: int, publish: Awaitable[int]) -> None:
        """Await `publish` (which answers how many it published) in an ``outbox
        publish`` span. The enqueue's span may have ended (the committer does not wait for
        this): its trace's sampling decision, not the span's recording, says whether to
        record; an unsampled trace gets no child span either."""
        if not trace.get_current_span().get_span_context().trace_flags.sampled:
            await publish
            return
        with _tracer.start_as_current_span(
            "outbox publish",
            kind=SpanKind.CLIENT,
            attributes={**AMQP_SEND, "messaging.batch.message_count": count},
        ) as span:
            span.set_attribute("outbox.published", await publish)

    async def _publish_counted(self, batches: Sequence[Sequence[Envelope]]) -> int:
        return sum(len(ids) for ids in await self._publish_many(batches))

    async def _submit_counted(self, envelopes: Sequence[Envelope]) -> int:
        return len(await self._batches.submit(envelopes))

    async def _publish_many(self, batches: Sequence[Sequence[Envelope]]) -> list[list[Any]]:
        published: list[list[Any]] = [[] for _ in batches]
        await self._publish_in_rounds(batches, published)
        ids = [row_id for batch in published for row_id in batch]
        if ids:
            try:
                await self._marks.mark_published(ids, self._clock.now())
            except Exception as exc:  # noqa: BLE001 - nothing is lost: see below
                # Published but not marked: the relay will publish them again, and the
                # consumers' claim makes the duplicates harmless.
                log.warning("could not mark %d outbox rows published: %s", len(ids), exc)
        return published

    async def _publish_in_rounds(
        self, batches: Sequence[Sequence[Envelope]], published: list[list[Any]]
    ) -> None:
        """Each dispatch's messages in order, the dispatches side by side: round k
        publishes the k-th message of every dispatch whose earlier ones were confirmed,
        all in one `publish_many` (one write, a confirm each). A dispatch stops at its
        first failure; the relay publishes the rest, in order. Most dispatches are one
        message, so most batches take one round. One deadline for all the rounds."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._timeout
        going = [at for at, batch in enumerate(batches) if batch]
        position = 0
        left_over = 0  # messages not published: each failure's and the rest of its dispatch
        why: BaseException | None = None
        while going:
            envelopes = [batches[at][position] for at in going]
            left_s = deadline - loop.time()
            outcomes: Sequence[BaseException | None] = [TimeoutError("out of time")] * len(going)
            if left_s > 0:
                try:
                    outcomes = await self._publisher.publish_many(envelopes, left_s)
                except Exception as exc:
                    log.exception("fast path failed to publish %d messages", len(going))
                    left_over += sum(len(batches[at]) - position for at in going)
                    why = why or exc
                    break
            still = []
            for at, envelope, outcome in zip(going, envelopes, outcomes, strict=True):
                if outcome is None:
                    published[at].append(envelope.id)
                    if position + 1 < len(batches[at]):
                        still.append(at)
                    continue
                left_over += len(batches[at]) - position
                if not isinstance(outcome, BrokerUnavailableError | TimeoutError):
                    log.error("fast path failed to publish %s", envelope.id, exc_info=outcome)
                why = why or outcome
            going = still
            position += 1
        if left_over:  # the rows are committed: the relay publishes them, in order
            self._left_over.note(left_over, why)


# At most this many batches of jobs past their deadline expire in one pass.
_EXPIRE_BATCHES = 20


async def _swept(what: str, sweep: Callable[[], Awaitable[int]]) -> None:
    try:
        await sweep()
    except StoreUnavailableError as exc:
        # An outage, said once a sweep by the relay below: no traceback.
        log.warning("%s: database unavailable (%s)", what, exc)
    except Exception:
        log.exception("%s failed; trying again later", what)


class EnvelopeDispatch:
    """An ``OutboxPublisher`` as a dispatcher of envelopes (``dispatch`` and
    ``dispatch_each`` as the OutboxDispatcher port has them, over encoded messages)."""

    def __init__(self, publisher: OutboxPublisher) -> None:
        self.dispatch = publisher.dispatch_envelopes
        self.dispatch_each = publisher.dispatch_each_envelopes


class OutboxRelay:
    def __init__(
        self,
        engine: AsyncEngine,
        publisher: EnvelopePublisher,
        clock: Clock,
        catalog: JobCatalog,
        *,
        batch: int,
        min_age: timedelta,
        interval: timedelta,
        sweep_every: timedelta = timedelta(seconds=30),
        sweep_after: timedelta = timedelta(seconds=60),
        expire_every: timedelta = timedelta(seconds=5),
    ) -> None:
        self._engine = engine
        self._publisher = publisher
        self._clock = clock
        self._catalog = catalog
        self._batch = batch
        self._min_age = min_age
        self._interval = interval.total_seconds()
        self._sweep_every = sweep_every.total_seconds()
        self._sweep_after = sweep_after
        self._last_sweep = 0.0
        self._expire_every = expire_every.total_seconds()
        self._last_expiry = 0.0

    async def run_forever(self, stop: asyncio.Event | None = None) -> None:
        """Relay and sweep until `stop` is set (never, without one): it is looked at
        between two passes, so a pass is never cut short by a stop."""
        stop = stop or asyncio.Event()
        loop = asyncio.get_running_loop()
        while not stop.is_set():
            if loop.time() - self._last_sweep >= self._sweep_every:
                self._last_sweep = loop.time()
                await _swept("lease sweep", self.sweep_leases)
            if loop.time() - self._last_expiry >= self._expire_every:
                self._last_expiry = loop.time()
                await _swept("deadline sweep", self.expire_overdue)
            try:
                published = await self.relay_once()
            except StoreUnavailableError as exc:
                log.warning("outbox relay: database unavailable (%s)", exc)
                published = 0
            except Exception:
                log.exception("outbox relay failed; trying again")
                published = 0
            if published < self._batch:
                await sleep_unless(stop, self._interval)

    async def relay_once(self) -> int:
        """Publish one batch of rows the fast path missed; return how many were published."""
        now = self._clock.now()
        with database_errors():
            async with self._engine.begin() as conn:
                rows = (
                    await conn.execute(
                        select(
                            outbox.c.id,
                            outbox.c.queue,
                            outbox.c.body,
                            outbox.c.headers,
                            outbox.c.not_before,
                        )
                        .where(
                            outbox.c.published_at.is_(None),
                            outbox.c.created_at <= now - self._min_age,
                        )
                        # Rows that keep failing go last, so they cannot block the rest.
                        .order_by(outbox.c.attempts, outbox.c.created_at)
                        .limit(self._batch)
                        .with_for_update(skip_locked=True)
                    )
                ).all()
                if not rows:
                    return 0
                envelopes = [
                    Envelope(
                        id=row.id,
                        queue=row.queue,
                        body=row.body,
                        headers=row.headers,
                        not_before=row.not_before,
                    )
                    for row in rows
                ]
                with _tracer.start_as_current_span(
                    "outbox relay",
                    kind=SpanKind.CLIENT,
                    attributes={**AMQP_SEND, "messaging.batch.message_count": len(envelopes)},
                ) as span:
                    published = await self._publish(conn, envelopes)
                    span.set_attribute("outbox.published", published)
        if published:
            log.info("outbox relay published %d messages", published)
        return published

    async def _publish(self, conn: AsyncConnection, envelopes: Sequence[Envelope]) -> int:
        results = await self._publisher.publish_many(envelopes)
        published = [e.id for e, r in zip(envelopes, results, strict=True) if r is None]
        failed = [(e.id, r) for e, r in zip(envelopes, results, strict=True) if r is not None]
        if published:
            await conn.execute(
                update(outbox)
                .where(outbox.c.id.in_(published))
                .values(published_at=self._clock.now())
            )
        if failed:
            first_error = failed[0][1]
            if not isinstance(first_error, BrokerUnavailableError):
                log.error("outbox rows cannot be published: %r", first_error)
            await conn.execute(
                update(outbox)
                .where(outbox.c.id.in_([row_id for row_id, _ in failed]))
                .values(attempts=outbox.c.attempts + 1, last_error=str(first_error)[:500])
            )
        return len(published)

    async def expire_overdue(self) -> int:
        """Expire the waiting jobs whose deadline has passed, a batch at a time: a job
        whose message is parked behind a delay or a limit ends on time all the same (a
        worker that gets the message first expires it as well). How many expired."""
        now, expired = self._clock.now(), 0
        for _ in range(_EXPIRE_BATCHES):  # a backlog of them goes in one pass, a batch a time
            with database_errors():
                async with self._engine.begin() as conn:
                    rows = await conn.execute(EXPIRE_OVERDUE, {"now": now, "batch": self._batch})
                    count = len(rows.all())
            expired += count
            if count < self._batch:
                break
        if expired:
            log.info("%d jobs expired: not started by their deadline", expired)
        return expired

    async def sweep_leases(self) -> int:
        """Publish again the jobs whose lease ended more than `sweep_after` ago."""
        now = self._clock.now()
        with database_errors():
            async with self._engine.begin() as conn:
                stale = (
                    select(jobs.c.id)
                    .where(
                        jobs.c.status == "running",
                        jobs.c.lease_until < now - self._sweep_after,
                        ~paused_job(),  # none starts before its resume; its message waits
                    )
                    .order_by(jobs.c.lease_until)
                    .limit(self._batch)
                    .with_for_update(skip_locked=True)
                )
                rows = (
                    await conn.execute(
                        update(jobs)
                        .where(jobs.c.id.in_(stale.scalar_subquery()))
                        .values(lease_until=now)
                        .returning(*jobs.c)
                    )
                ).all()
        for row in rows:
            log.warning("job %s lost its worker and its message; publishing it again", row.id)
            # Due now (its lease has just been ended): no due time in the message.
            job = job_from_row(row._mapping)
            message = message_for(job, self._catalog.get(job.type), not_before=None)
            try:
                await self._publisher.publish(encode(message))
            except BrokerUnavailableError:
                return 0  # the lease stays ended: the next sweep tries again
        return len(rows)
