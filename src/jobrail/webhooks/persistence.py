"""Webhooks in the database, and the relay that turns job events into deliveries."""

import asyncio
import contextlib
import logging
import uuid
from collections import defaultdict
from collections.abc import AsyncIterator, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, func, insert, literal_column, select, update
from sqlalchemy.engine import RowMapping
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession

from jobrail.events.feed import EventCursor, EventFilter
from jobrail.events.persistence import SqlaJobEventLog
from jobrail.jobs.domain import Job, JobStatus
from jobrail.jobs.enqueue import EnqueueJob
from jobrail.jobs.intake import EnqueueJobCommand
from jobrail.kernel.clock import Clock, sleep_unless
from jobrail.kernel.errors import ConflictError, StoreUnavailableError
from jobrail.kernel.ids import TenantId
from jobrail.outbox.uow import SqlaUnitOfWork, UnitOfWorkFactory
from jobrail.store.engine import reading
from jobrail.store.errors import database_errors
from jobrail.store.mapping import job_from_row
from jobrail.store.tables import WEBHOOK_DELIVERIES, jobs, webhook_relay, webhooks
from jobrail.webhooks.domain import Webhook

log = logging.getLogger("jobrail.webhooks")

DELIVER = "webhooks.deliver"


def _webhook(row: RowMapping) -> Webhook:
    return Webhook(
        id=row["id"],
        tenant_id=TenantId(row["tenant_id"]),
        url=row["url"],
        secret=row["secret"],
        events=tuple(row["events"]),
        created_at=row["created_at"],
        start=EventCursor(int(row["start_tx"]), int(row["start_event_id"])),
    )


class SqlaWebhookStore:
    def __init__(self, engine: AsyncEngine, clock: Clock) -> None:
        self._engine = engine
        self._clock = clock

    async def add(self, webhook: Webhook, *, at_most: int) -> bool:
        with database_errors():
            async with self._engine.begin() as conn:
                # One tenant's registrations one at a time, so that the count below is
                # the one the insert adds to (SQLite's write transactions are already
                # serial: they begin IMMEDIATE).
                if conn.dialect.name == "postgresql":
                    lock = func.hashtext(f"jobrail.webhooks:{webhook.tenant_id}")
                    await conn.execute(select(func.pg_advisory_xact_lock(lock)))
                held = await conn.scalar(
                    select(func.count())
                    .select_from(webhooks)
                    .where(
                        webhooks.c.tenant_id == webhook.tenant_id,
                        webhooks.c.deleted_at.is_(None),
                    )
                )
                if (held or 0) >= at_most:
                    return False
                await conn.execute(
                    insert(webhooks).values(
                        id=webhook.id,
                        tenant_id=webhook.tenant_id,
                        url=webhook.url,
                        secret=webhook.secret,
                        events=list(webhook.events),
                        start_tx=webhook.start.tx,
                        start_event_id=webhook.start.id,
                        created_at=webhook.created_at,
                    )
                )
        return True

    async def of_tenant(self, tenant: TenantId) -> Sequence[Webhook]:
        query = (
            select(webhooks)
            .where(webhooks.c.tenant_id == tenant, webhooks.c.deleted_at.is_(None))
            .order_by(webhooks.c.created_at, webhooks.c.id)
        )
        return await self._select(query)

    async def get(self, tenant: TenantId, webhook_id: uuid.UUID) -> Webhook | None:
        query = select(webhooks).where(
            webhooks.c.id == webhook_id,
            webhooks.c.tenant_id == tenant,
            webhooks.c.deleted_at.is_(None),
        )
        found = await self._select(query)
        return found[0] if found else None

    async def any_active(self) -> bool:
        """Whether any tenant has a webhook (not deleted)."""
        query = select(webhooks.c.id).where(webhooks.c.deleted_at.is_(None)).limit(1)
        with database_errors():
            async with reading(self._engine) as conn:
                return (await conn.execute(query)).first() is not None

    async def active_on(self, session: AsyncSession) -> list[Webhook]:
        """Every tenant's webhooks (not the deleted ones), read in `session`'s
        transaction (the relay's, which holds its place in the feed while it reads)."""
        rows = await session.execute(select(webhooks).where(webhooks.c.deleted_at.is_(None)))
        return [_webhook(row) for row in rows.mappings()]

    async def delete(self, tenant: TenantId, webhook_id: uuid.UUID) -> bool:
        with database_errors():
            async with self._engine.begin() as conn:
                done = await conn.execute(
                    update(webhooks)
                    .where(
                        webhooks.c.id == webhook_id,
                        webhooks.c.tenant_id == tenant,
                        webhooks.c.deleted_at.is_(None),
                    )
                    .values(deleted_at=self._clock.now())
                )
        return bool(done.rowcount)

    async def _select(self, query: Any) -> list[Webhook]:
        with database_errors():
            async with reading(self._engine) as conn:
                return [_webhook(row) for row in (await conn.execute(query)).mappings()]


class WebhookRelay:
    """Turns job events into delivery jobs (`webhooks.deliver`), one per event and
    webhook that wants it (an event after the webhook's start), idempotent on both.

    Its place in the feed is one row, `webhook_relay`, locked (Postgres) or written
    first (SQLite) by the transaction that enqueues the deliveries and moves it on: the
    deliveries and the new place commit together, and two relays (one per worker
    process) take turns. A delivery job's own events are never delivered. With no
    webhook anywhere, a round is one read."""

    def __init__(
        self,
        engine: AsyncEngine,
        units: UnitOfWorkFactory,
        enqueue: EnqueueJob,
        store: SqlaWebhookStore,
        events: SqlaJobEventLog,
        clock: Clock,
        *,
        interval_s: float,
        batch: int = 200,
    ) -> None:
        self._engine = engine
        self._units = units
        self._enqueue = enqueue
        self._store = store
        self._events = events
        self._clock = clock
        self._interval = interval_s
        self._batch = batch
        self._pg = engine.dialect.name == "postgresql"

    async def run_forever(self, stop: asyncio.Event | None = None) -> None:
        """Relay until `stop` is set (never, without one), looked at between passes."""
        stop = stop or asyncio.Event()
        while not stop.is_set():
            try:
                relayed = await self.relay_once()
            except StoreUnavailableError as exc:
                log.warning("webhook relay: database unavailable (%s)", exc)
                relayed = 0
            except Exception:
                log.exception("webhook relay failed; trying again")
                relayed = 0
            if relayed < self._batch:
                await sleep_unless(stop, self._interval)

    async def relay_once(self) -> int:
        """Enqueue the deliveries of the next events; how many events it went past."""
        if not await self._store.any_active():
            # One read, no lock, while no tenant has a webhook. The place stays where it
            # is: a webhook made later starts after the head of its moment, and the
            # first round that sees it jumps there.
            return 0
        async with self._units(SqlaUnitOfWork) as uow, _database_errors():
            place, stored = await self._take_place(uow)
            # Read with the place held: a webhook made meanwhile is seen by this round
            # or has its start after what this round goes past.
            hooks = await self._store.active_on(uow.session)
            if not hooks:
                return 0  # all deleted meanwhile (the unit of work rolls back)
            # No webhook wants an event before its start.
            held = place if stored else None  # a place just made is written whatever
            place = max(place, min(hook.start for hook in hooks))
            by_tenant: dict[str, list[Webhook]] = defaultdict(list)
            for hook in hooks:
                by_tenant[hook.tenant_id].append(hook)
            events = await self._events.read_on(uow.session, EventFilter(None, place), self._batch)
            for event in events:
                if event.job_type == DELIVER:
                    continue
                for hook in by_tenant.get(event.tenant_id, ()):
                    if hook.wants(event.name, event.cursor):
                        await self._enqueue_delivery(uow, hook, event.cursor)
            moved = events[-1].cursor if events else place
            if moved != held:  # else nothing to write (the unit of work rolls back)
                await self._move(uow, moved)
                await uow.commit()
        return len(events)

    async def _enqueue_delivery(
        self, uow: SqlaUnitOfWork, hook: Webhook, event: EventCursor
    ) -> None:
        try:
            await self._enqueue.into(uow, _delivery(hook, str(event)))
        except ConflictError:
            # The tenant's own job holds the delivery's idempotency key (the key is in
            # the tenant's space): that one delivery is lost to the tenant that took
            # its key, never the round (nothing of it was written).
            log.warning(
                "webhook %s: event %s not delivered, its key is another job's", hook.id, event
            )

    async def _take_place(self, uow: SqlaUnitOfWork) -> tuple[EventCursor, bool]:
        """The relay's place, locked, and whether it was stored (else it is made now,
        at the head, and must be written)."""
        t = webhook_relay
        now = self._clock.now()
        if self._pg:
            row = (
                await uow.session.execute(
                    select(t.c.tx, t.c.event_id).where(t.c.id == 1).with_for_update()
                )
            ).first()
        else:
            # A write first: SQLite's transaction takes its lock now, not at the end.
            await uow.session.execute(update(t).where(t.c.id == 1).values(updated_at=now))
            row = (
                await uow.session.execute(select(t.c.tx, t.c.event_id).where(t.c.id == 1))
            ).first()
        if row is None:
            # The row is gone (the migration makes it): start from now, not from the
            # oldest event kept, whose deliveries may have been made and pruned.
            head = await self._events.head_on(uow.session)
            await uow.session.execute(
                insert(t).values(id=1, tx=head.tx, event_id=head.id, updated_at=now)
            )
            return head, False
        return EventCursor(int(row[0]), int(row[1])), True

    async def _move(self, uow: SqlaUnitOfWork, place: EventCursor) -> None:
        await uow.session.execute(
            update(webhook_relay)
            .where(webhook_relay.c.id == 1)
            .values(tx=place.tx, event_id=place.id, updated_at=self._clock.now())
        )


@contextlib.asynccontextmanager
async def _database_errors() -> AsyncIterator[None]:
    with database_errors():
        yield


def _delivery(hook: Webhook, event_id: str) -> EnqueueJobCommand:
    return EnqueueJobCommand(
        tenant_id=hook.tenant_id,
        type=DELIVER,
        payload={"webhook_id": str(hook.id), "event_id": event_id},
        idempotency_key=f"jobrail.webhook:{hook.id}:{event_id}",
        # The relay's one position moves past every tenant's events: never held back
        # by one tenant's cap.
        capped=False,
    )


class SqlaWebhookOpsReads:
    """jobrail.webhooks.ports.WebhookOpsReads. The deliveries are read by
    ix_jobs_webhook_deliveries (its predicate, as a literal), never by their type as a
    parameter; of webhooks, the URL alone is ever selected."""

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine

    async def webhook_counts(self) -> dict[TenantId, int]:
        query = (
            select(webhooks.c.tenant_id, func.count())
            .where(webhooks.c.deleted_at.is_(None))
            .group_by(webhooks.c.tenant_id)
        )
        with database_errors():
            async with self._engine.connect() as conn:
                rows = (await conn.execute(query)).all()
        return {TenantId(tenant): int(n) for tenant, n in rows}

    async def delivery_counts(self, since: datetime) -> list[tuple[TenantId, JobStatus, int]]:
        groups: tuple[ColumnElement[Any], ...] = (jobs.c.tenant_id, jobs.c.status)
        if self._engine.dialect.name == "sqlite":
            # SQLite (never analyzed here) would rather scan all of an index that gives
            # the groups in order than sort the day's few; unary + keeps it off those.
            groups = (literal_column("+jobs.tenant_id"), literal_column("+jobs.status"))
        query = (
            select(jobs.c.tenant_id, jobs.c.status, func.count())
            .where(WEBHOOK_DELIVERIES, jobs.c.created_at >= since)
            .group_by(*groups)
        )
        with database_errors():
            async with self._engine.connect() as conn:
                rows = (await conn.execute(query)).all()
        return [(TenantId(t), JobStatus(s), int(n)) for t, s, n in rows]

    async def failed_deliveries(self, since: datetime, limit: int) -> list[tuple[Job, str | None]]:
        query = (
            select(jobs)
            .where(
                WEBHOOK_DELIVERIES,
                jobs.c.created_at >= since,
                jobs.c.status == JobStatus.FAILED.value,
            )
            .order_by(jobs.c.created_at.desc())
            .limit(limit)
        )
        with database_errors():
            async with self._engine.connect() as conn:
                found = [job_from_row(row) for row in (await conn.execute(query)).mappings()]
                hook_ids = {hook for job in found if (hook := _webhook_id(job)) is not None}
                urls: dict[uuid.UUID, str] = {}
                if hook_ids:
                    query = select(webhooks.c.id, webhooks.c.url).where(webhooks.c.id.in_(hook_ids))
                    urls = {row.id: row.url for row in await conn.execute(query)}
        return [(job, urls.get(hook) if (hook := _webhook_id(job)) else None) for job in found]


def _webhook_id(job: Job) -> uuid.UUID | None:
    try:
        return uuid.UUID(str(job.payload["webhook_id"]))
    except (KeyError, ValueError):
        return None
