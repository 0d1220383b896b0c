"""Hand-written fakes of the contexts' ports. They keep state; tests assert on it.
The same contract tests run against them and against the real adapters."""

import copy
from collections.abc import Sequence
from typing import Self

from contexts.billing.application.ports import InvoicePage
from contexts.billing.domain.invoice import Invoice, InvoiceId, InvoiceStatus
from contexts.billing.domain.month_end import BillingMonth, MonthEndRun
from contexts.notifications.application.ports import EmailMessage
from contexts.notifications.domain.notification import Notification
from contexts.sync.application.ports import VendorItem, VendorPage
from contexts.sync.domain.account import Account
from jobrail.jobs.domain import Job
from jobrail.jobs.enqueue import EnqueueJobCommand, EnqueueResult
from jobrail.jobs.flow import Flow, FlowKind
from jobrail.jobs.workflows import BatchCommand, ChainCommand, FlowStarted
from jobrail.kernel.errors import PermanentError
from jobrail.kernel.events import IntegrationEvent
from jobrail.kernel.ids import JobId, TenantId, new_id
from tests.fakes import START


class FakeInvoiceRepository:
    def __init__(self, store: dict[InvoiceId, Invoice] | None = None) -> None:
        self.store: dict[InvoiceId, Invoice] = store if store is not None else {}

    async def add(self, invoice: Invoice) -> None:
        self.store[invoice.id] = copy.deepcopy(invoice)

    async def get(
        self, tenant_id: TenantId, invoice_id: InvoiceId, *, for_update: bool = False
    ) -> Invoice | None:
        invoice = self.store.get(invoice_id)
        if invoice is None or invoice.tenant_id != tenant_id:
            return None
        return copy.deepcopy(invoice)

    async def list(
        self,
        tenant_id: TenantId,
        *,
        status: InvoiceStatus | None,
        customer_id: str | None,
        limit: int,
        after: InvoiceId | None,
    ) -> InvoicePage:
        matching = sorted(
            (
                i
                for i in self.store.values()
                if i.tenant_id == tenant_id
                and (status is None or i.status is status)
                and (customer_id is None or i.customer_id == customer_id)
                and (after is None or i.id < after)
            ),
            key=lambda i: i.id,
            reverse=True,
        )
        items = [copy.deepcopy(i) for i in matching[:limit]]
        return InvoicePage(items=items, next_after=items[-1].id if len(matching) > limit else None)

    async def save(self, invoice: Invoice) -> None:
        self.store[invoice.id] = copy.deepcopy(invoice)

    async def due_for_month_end(
        self, tenant_id: TenantId, month: BillingMonth
    ) -> Sequence[InvoiceId]:
        due = [
            i
            for i in self.store.values()
            if i.tenant_id == tenant_id and i.due_for_month_end(month)
        ]
        return [i.id for i in sorted(due, key=lambda i: (i.created_at, i.id))]


def _stored(run: MonthEndRun) -> MonthEndRun:
    """The run as a table keeps it: without the events it has not published yet."""
    stored = copy.deepcopy(run)
    stored.pull_events()
    return stored


class FakeMonthEndRunRepository:
    def __init__(self, store: dict[tuple[str, BillingMonth], MonthEndRun]) -> None:
        self.store = store

    async def add(self, run: MonthEndRun) -> bool:
        if (run.tenant_id, run.month) in self.store:
            return False
        self.store[(run.tenant_id, run.month)] = _stored(run)
        return True

    async def get(
        self, tenant_id: TenantId, month: BillingMonth, *, for_update: bool = False
    ) -> MonthEndRun | None:
        run = self.store.get((tenant_id, month))
        return copy.deepcopy(run) if run else None

    async def save(self, run: MonthEndRun) -> None:
        self.store[(run.tenant_id, run.month)] = _stored(run)


class FakeWorkflows:
    """Batches and chains as the commands that started them, with the idempotency-key
    rule of the real ones (one flow per tenant and key)."""

    def __init__(self, started: list[tuple[BatchCommand | ChainCommand, FlowStarted]]) -> None:
        self.started = started

    async def batch(self, cmd: BatchCommand) -> FlowStarted:
        return self._start(cmd, FlowKind.BATCH, len(cmd.jobs))

    async def chain(self, cmd: ChainCommand) -> FlowStarted:
        return self._start(cmd, FlowKind.CHAIN, len(cmd.steps))

    def _start(self, cmd: BatchCommand | ChainCommand, kind: FlowKind, total: int) -> FlowStarted:
        for earlier, started in self.started:
            if cmd.idempotency_key and (earlier.tenant_id, earlier.idempotency_key) == (
                cmd.tenant_id,
                cmd.idempotency_key,
            ):
                return FlowStarted(flow=started.flow, members=[], created=False)
        flow = Flow(
            id=new_id(),
            tenant_id=cmd.tenant_id,
            kind=kind,
            total=total,
            created_at=START,
            updated_at=START,
            idempotency_key=cmd.idempotency_key,
            name=cmd.name,
        )
        started = FlowStarted(flow=flow, members=[])
        self.started.append((cmd, started))
        return started


class FakeEventPublisher:
    def __init__(self) -> None:
        self.published: list[IntegrationEvent] = []

    async def publish(self, event: IntegrationEvent) -> None:
        self.published.append(event)


class FakeJobQueue:
    """Enqueue with the idempotency-key rule of the real one."""

    def __init__(self) -> None:
        self.jobs: list[Job] = []

    async def enqueue(self, cmd: EnqueueJobCommand) -> EnqueueResult:
        for job in self.jobs:
            if cmd.idempotency_key and job.idempotency_key == cmd.idempotency_key:
                return EnqueueResult(job=job, created=False)
        job = Job.create(
            id=JobId(new_id()),
            type=cmd.type,
            queue="jobs.io",
            tenant_id=cmd.tenant_id,
            payload=dict(cmd.payload),
            max_attempts=5,
            now=START,
            entity_id=cmd.entity_id,
            idempotency_key=cmd.idempotency_key,
        )
        self.jobs.append(job)
        return EnqueueResult(job=job, created=True)


class _FakeUnitOfWork:
    """Changes become visible on commit; published events and jobs only then too."""

    def __init__(self) -> None:
        self.commits = 0
        self.events = FakeEventPublisher()
        self.queue = FakeJobQueue()
        self.workflows = FakeWorkflows([])
        self.committed_events: list[IntegrationEvent] = []
        self.committed_jobs: list[Job] = []
        self.committed_flows: list[tuple[BatchCommand | ChainCommand, FlowStarted]] = []

    async def __aenter__(self) -> Self:
        self.events = FakeEventPublisher()
        self.queue = FakeJobQueue()
        self.queue.jobs = list(self.committed_jobs)
        self.workflows = FakeWorkflows(list(self.committed_flows))
        self._begin()
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None

    async def commit(self) -> None:
        self.commits += 1
        self._commit()
        self.committed_events.extend(self.events.published)
        self.committed_jobs = list(self.queue.jobs)
        self.committed_flows = list(self.workflows.started)

    def _begin(self) -> None: ...

    def _commit(self) -> None: ...


class FakeBillingUnitOfWork(_FakeUnitOfWork):
    def __init__(self) -> None:
        super().__init__()
        self.store: dict[InvoiceId, Invoice] = {}
        self.runs: dict[tuple[str, BillingMonth], MonthEndRun] = {}

    def _begin(self) -> None:
        self.invoices = FakeInvoiceRepository(copy.deepcopy(self.store))
        self.month_end_runs = FakeMonthEndRunRepository(copy.deepcopy(self.runs))

    def _commit(self) -> None:
        self.store = copy.deepcopy(self.invoices.store)
        self.runs = copy.deepcopy(self.month_end_runs.store)


class FakeEmailSender:
    def __init__(self, fail_with: list[Exception] | None = None) -> None:
        self.sent: list[EmailMessage] = []
        self._fail_with = list(fail_with or [])

    async def send(self, message: EmailMessage) -> None:
        if self._fail_with:
            raise self._fail_with.pop(0)
        self.sent.append(message)


class FakeNotificationRepository:
    def __init__(self, store: dict[object, Notification]) -> None:
        self.store = store

    async def add(self, notification: Notification) -> None:
        self.store[notification.id] = copy.deepcopy(notification)

    async def by_source(
        self, tenant_id: TenantId, template: str, source_event_id: str
    ) -> Notification | None:
        for n in self.store.values():
            if (n.tenant_id, n.template, n.source_event_id) == (
                tenant_id,
                template,
                source_event_id,
            ):
                return copy.deepcopy(n)
        return None

    async def list(
        self, tenant_id: TenantId, *, subject_id: str | None, limit: int
    ) -> list[Notification]:
        found = [
            n
            for n in self.store.values()
            if n.tenant_id == tenant_id and (subject_id is None or n.subject_id == subject_id)
        ]
        return [copy.deepcopy(n) for n in sorted(found, key=lambda n: n.id, reverse=True)[:limit]]

    async def save(self, notification: Notification) -> None:
        self.store[notification.id] = copy.deepcopy(notification)


class FakeInbox:
    def __init__(self, seen: set[tuple[str, str]]) -> None:
        self.seen = seen

    async def accept(self, consumer: str, message_id: str) -> bool:
        if (consumer, message_id) in self.seen:
            return False
        self.seen.add((consumer, message_id))
        return True


class FakeNotificationsUnitOfWork(_FakeUnitOfWork):
    def __init__(self) -> None:
        super().__init__()
        self.store: dict[object, Notification] = {}
        self.seen: set[tuple[str, str]] = set()

    def _begin(self) -> None:
        self.notifications = FakeNotificationRepository(copy.deepcopy(self.store))
        self.inbox = FakeInbox(set(self.seen))

    def _commit(self) -> None:
        self.store = copy.deepcopy(self.notifications.store)
        self.seen = set(self.inbox.seen)


class FakeAccountRepository:
    def __init__(self, store: dict[tuple[str, str], Account]) -> None:
        self.store = store

    async def get(
        self, tenant_id: TenantId, account_id: str, *, for_update: bool = False
    ) -> Account | None:
        account = self.store.get((tenant_id, account_id))
        return copy.deepcopy(account) if account else None

    async def get_or_add(self, tenant_id: TenantId, account_id: str) -> Account:
        self.store.setdefault((tenant_id, account_id), Account(tenant_id, account_id))
        return copy.deepcopy(self.store[(tenant_id, account_id)])

    async def save(self, account: Account) -> None:
        self.store[(account.tenant_id, account.account_id)] = copy.deepcopy(account)


class FakeItemStore:
    def __init__(self, rows: dict[tuple[str, str, str], dict[str, object]]) -> None:
        self.rows = rows

    async def store(self, tenant_id: TenantId, account_id: str, items: Sequence[VendorItem]) -> int:
        new = 0
        for item in items:
            key = (tenant_id, account_id, item.id)
            new += key not in self.rows
            self.rows[key] = dict(item.data)
        return new

    async def count(self, tenant_id: TenantId, account_id: str) -> int:
        return sum(1 for k in self.rows if k[:2] == (tenant_id, account_id))


class FakeSyncUnitOfWork(_FakeUnitOfWork):
    def __init__(self) -> None:
        super().__init__()
        self.accounts_store: dict[tuple[str, str], Account] = {}
        self.items_store: dict[tuple[str, str, str], dict[str, object]] = {}

    def _begin(self) -> None:
        self.accounts = FakeAccountRepository(copy.deepcopy(self.accounts_store))
        self.items = FakeItemStore(copy.deepcopy(self.items_store))

    def _commit(self) -> None:
        self.accounts_store = copy.deepcopy(self.accounts.store)
        self.items_store = copy.deepcopy(self.items.rows)


class FakeVendorClient:
    """Deterministic pages like the sandbox vendor's, plus scripted failures."""

    def __init__(self, pages: int = 3, page_size: int = 10) -> None:
        self.pages = pages
        self.page_size = page_size
        self.calls: list[tuple[str, str | None]] = []
        self.failures: dict[int, Exception] = {}

    async def fetch_page(self, account_id: str, cursor: str | None) -> VendorPage:
        self.calls.append((account_id, cursor))
        failure = self.failures.pop(len(self.calls), None)
        if failure is not None:
            raise failure
        if "bad" in account_id:
            raise PermanentError(
                f"vendor refused account {account_id}: 400 account {account_id} is suspended"
            )
        page = int(cursor[1:]) if cursor else 0
        first = page * self.page_size
        return VendorPage(
            items=[
                VendorItem(id=f"{account_id}-{n}", data={"id": f"{account_id}-{n}", "value": n})
                for n in range(first, first + self.page_size)
            ],
            next_cursor=f"p{page + 1}" if page + 1 < self.pages else None,
            pages=self.pages,
        )


class FakeThrottle:
    def __init__(self) -> None:
        self.turns = 0

    async def wait_turn(self, tenant_id: TenantId) -> None:
        self.turns += 1
