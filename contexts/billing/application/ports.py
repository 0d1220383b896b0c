from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, Self

from contexts.billing.domain.invoice import Invoice, InvoiceId, InvoiceStatus
from jobrail.kernel.ids import TenantId
from jobrail.ports import EventPublisher, JobQueue


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


class BillingUnitOfWork(Protocol):
    """One transaction over invoices, the events they publish and the jobs they
    enqueue; rolls back unless `commit` is called."""

    invoices: InvoiceRepository
    events: EventPublisher
    queue: JobQueue

    async def __aenter__(self) -> Self: ...

    async def __aexit__(self, *exc_info: object) -> None: ...

    async def commit(self) -> None: ...
