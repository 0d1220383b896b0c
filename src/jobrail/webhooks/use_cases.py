"""Registering webhooks, and delivering one event to one of them."""

import json
import logging
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import timedelta

from jobrail.events.feed import EVENT_NAMES, EventCursor, EventFilter, JobEventLog, event_document
from jobrail.jobs.domain import Job, JobStatus
from jobrail.kernel.clock import Clock
from jobrail.kernel.errors import ConflictError, NotFoundError
from jobrail.kernel.ids import TenantId
from jobrail.webhooks.domain import (
    DEFAULT_EVENTS,
    Webhook,
    check_addresses,
    check_events,
    check_secret,
    check_url,
    lookup_of,
    new_secret,
    origin,
    sign,
)
from jobrail.webhooks.ports import (
    DeliveryFailedError,
    HostResolver,
    WebhookOpsReads,
    WebhookSender,
    WebhookStore,
)

log = logging.getLogger("jobrail.webhooks")

MAX_WEBHOOKS_PER_TENANT = 20


@dataclass(frozen=True, slots=True)
class RegisterWebhookCommand:
    tenant_id: TenantId
    url: str
    events: Sequence[str] | None = None
    secret: str | None = None
    # Where the API is reached (host, port): a webhook may not point back at it.
    own_hosts: Iterable[tuple[str, int]] = ()


class Webhooks:
    """A webhook's URL is checked when it is registered (check_url). Where private
    addresses are allowed, its host name is also looked up, and refused if it resolves
    to this API's own address: a delivery checks again, but the tenant learns it now.
    `own_hosts` is where the API listens (JOBRAIL_API__HOST and __PORT), besides where
    each request reached it."""

    def __init__(
        self,
        store: WebhookStore,
        events: JobEventLog,
        clock: Clock,
        resolver: HostResolver,
        *,
        private_ok: bool,
        own_hosts: Iterable[tuple[str, int]] = (),
    ) -> None:
        self._store = store
        self._events = events
        self._clock = clock
        self._resolver = resolver
        self._private_ok = private_ok
        self._own_hosts = tuple(own_hosts)

    async def register(self, cmd: RegisterWebhookCommand) -> Webhook:
        own = (*cmd.own_hosts, *self._own_hosts)
        url = check_url(cmd.url, private_ok=self._private_ok, own_hosts=own)
        lookup = lookup_of(url)
        if self._private_ok and lookup is not None:
            name, port = lookup
            check_addresses(await self._resolver.addresses(name, port), port, own)
        events = check_events(DEFAULT_EVENTS if cmd.events is None else cmd.events, EVENT_NAMES)
        secret = check_secret(cmd.secret) if cmd.secret is not None else new_secret()
        webhook = Webhook(
            id=uuid.uuid4(),
            tenant_id=cmd.tenant_id,
            url=url,
            secret=secret,
            events=events,
            created_at=self._clock.now(),
            start=await self._events.head(),
        )
        if not await self._store.add(webhook, at_most=MAX_WEBHOOKS_PER_TENANT):
            raise ConflictError(
                f"a tenant has at most {MAX_WEBHOOKS_PER_TENANT} webhooks: delete one first"
            )
        return webhook

    async def of_tenant(self, tenant: TenantId) -> Sequence[Webhook]:
        return await self._store.of_tenant(tenant)

    async def get(self, tenant: TenantId, webhook_id: uuid.UUID) -> Webhook:
        webhook = await self._store.get(tenant, webhook_id)
        if webhook is None:
            raise NotFoundError(f"webhook {webhook_id} not found")
        return webhook

    async def delete(self, tenant: TenantId, webhook_id: uuid.UUID) -> None:
        if not await self._store.delete(tenant, webhook_id):
            raise NotFoundError(f"webhook {webhook_id} not found")


@dataclass(frozen=True, slots=True)
class Delivered:
    status: int | None
    skipped: str | None = None


class DeliverWebhook:
    """POST one event to one webhook, signed. A receiver that answers other than 2xx,
    or cannot be reached, fails the attempt (DeliveryFailedError: it is retried with
    backoff, then dead-lettered, and can be redriven). A webhook deleted since, or an
    event pruned since, is skipped."""

    def __init__(
        self, store: WebhookStore, events: JobEventLog, sender: WebhookSender, clock: Clock
    ) -> None:
        self._store = store
        self._events = events
        self._sender = sender
        self._clock = clock

    async def __call__(
        self, tenant: TenantId, webhook_id: uuid.UUID, event_id: str, delivery_id: str
    ) -> Delivered:
        webhook = await self._store.get(tenant, webhook_id)
        if webhook is None:
            return Delivered(None, skipped="the webhook was deleted")
        cursor = EventCursor.parse(event_id)
        before = EventCursor(cursor.tx, cursor.id - 1)
        found = await self._events.read(EventFilter(tenant, before), 1)
        if not found or found[0].cursor != cursor:
            return Delivered(None, skipped="the event is no longer kept")
        body = json.dumps(
            {"type": f"job.{found[0].name}", "data": event_document(found[0])},
            separators=(",", ":"),
        ).encode()
        timestamp = int(self._clock.now().timestamp())
        headers = {
            "content-type": "application/json",
            "user-agent": "jobrail-webhooks",
            "webhook-id": delivery_id,
            "webhook-timestamp": str(timestamp),
            "webhook-signature": sign(webhook.secret, delivery_id, timestamp, body),
        }
        status = await self._sender.post(webhook.url, body, headers)
        if not 200 <= status < 300:
            raise DeliveryFailedError(f"the receiver answered {status}")
        return Delivered(status)


DELIVERIES_WINDOW = timedelta(hours=24)
_WAITING = frozenset({JobStatus.PENDING, JobStatus.RETRYING, JobStatus.RUNNING})


@dataclass(frozen=True, slots=True)
class TenantWebhooks:
    tenant_id: TenantId
    webhooks: int
    succeeded: int
    failed: int
    waiting: int
    """Not delivered yet: pending, retrying or being tried now."""


@dataclass(frozen=True, slots=True)
class FailedDelivery:
    job: Job
    receiver: str
    """The webhook's URL as scheme://host[:port] only."""


@dataclass(frozen=True, slots=True)
class WebhooksOverview:
    tenants: list[TenantWebhooks]
    tenants_total: int
    failed: list[FailedDelivery]


class GetWebhooksOverview:
    """Per tenant with webhooks or deliveries: its webhooks (not the deleted ones) and
    the deliveries enqueued in the last 24 h by how they stand, the tenants with the
    most failed first, at most `tenants` of them; and the newest `failures` failed
    deliveries (their redrive is any job's). A receiver is shown as scheme://host only:
    a URL's path or query may hold its token. The secret is never read."""

    def __init__(self, reads: WebhookOpsReads, clock: Clock) -> None:
        self._reads = reads
        self._clock = clock

    async def __call__(self, tenants: int = 20, failures: int = 20) -> WebhooksOverview:
        since = self._clock.now() - DELIVERIES_WINDOW
        hooks = await self._reads.webhook_counts()
        counts: dict[TenantId, dict[JobStatus, int]] = {tenant: {} for tenant in hooks}
        for tenant, status, count in await self._reads.delivery_counts(since):
            counts.setdefault(tenant, {})[status] = count
        rows = [
            TenantWebhooks(
                tenant_id=tenant,
                webhooks=hooks.get(tenant, 0),
                succeeded=by_status.get(JobStatus.SUCCEEDED, 0),
                failed=by_status.get(JobStatus.FAILED, 0),
                waiting=sum(n for status, n in by_status.items() if status in _WAITING),
            )
            for tenant, by_status in counts.items()
        ]
        rows.sort(key=lambda row: (-row.failed, row.tenant_id))
        failed = [
            FailedDelivery(job, "(gone)" if url is None else origin(url))
            for job, url in await self._reads.failed_deliveries(since, failures)
        ]
        return WebhooksOverview(rows[:tenants], len(rows), failed)
