from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, Self

from contexts.billing.domain.invoice import Invoice, InvoiceId, InvoiceStatus
from contexts.billing.domain.month_end import BillingMonth, MonthEndRun
from jobrail.kernel.ids import TenantId
from jobrail.ports import BatchCommand, EventPublisher, FlowStarted, JobQueue


@dataclass(frozen=True, slots=True)
class InvoicePage:
    items: list[Invoice]
    next_after: InvoiceId | None


@dataclass(frozen=True, slots=True)
class InvoiceRef:
    tenant_id: TenantId
    invoice_id: InvoiceId


class InvoiceRepository(Protocol):
    async def add(self, invoice: Invoice) -> None: ...

    async def get(
        self, tenant_id: TenantId, invoice_id: InvoiceId, *, for_update: bool = False
    ) -> Invoice | None:
        """The tenant's invoice, or None (another tenant's invoice is None too).
        `for_update` locks it until the transaction ends."""
        ...

    async def list(
        self,
        tenant_id: TenantId,
        *,
        status: InvoiceStatus | None,
        customer_id: str | None,
        limit: int,
        after: InvoiceId | None,
    ) -> InvoicePage: ...

    async def save(self, invoice: Invoice) -> None: ...

    async def due_for_auto_pay(
        self, *, after: InvoiceId | None, limit: int
    ) -> Sequence[InvoiceRef]:
        """Invoices of every tenant that are due for auto-pay (see Invoice), by id,
        the first `limit` after `after`."""
        ...

    async def due_for_month_end(
        self, tenant_id: TenantId, month: BillingMonth
    ) -> Sequence[InvoiceId]:
        """The tenant's invoices due for `month`'s run (see Invoice), oldest first."""
        ...


class MonthEndRunRepository(Protocol):
    async def add(self, run: MonthEndRun) -> bool:
        """Store a new run; False (storing nothing) if the tenant has one for its month
        already. A run being added at the same time makes this wait for its end."""
        ...

    async def get(
        self, tenant_id: TenantId, month: BillingMonth, *, for_update: bool = False
    ) -> MonthEndRun | None: ...

    async def save(self, run: MonthEndRun) -> None: ...


class Workflows(Protocol):
    async def batch(self, cmd: BatchCommand) -> FlowStarted:
        """Start a batch in the current transaction (its jobs commit with it)."""
        ...


class BillingUnitOfWork(Protocol):
    """One transaction over invoices, month-end runs, the events they publish and the
    jobs and batches they start; rolls back unless `commit` is called."""

    invoices: InvoiceRepository
    month_end_runs: MonthEndRunRepository
    events: EventPublisher
    queue: JobQueue
    workflows: Workflows

    async def __aenter__(self) -> Self: ...

    async def __aexit__(self, *exc_info: object) -> None: ...

    async def commit(self) -> None: ...
