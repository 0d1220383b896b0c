from dataclasses import dataclass

from contexts.billing.domain.invoice import InvoiceId, InvoiceStatus
from jobrail.kernel.ids import TenantId


@dataclass(frozen=True, slots=True)
class LineInput:
    description: str
    quantity: int
    unit_price_minor: int


@dataclass(frozen=True, slots=True)
class CreateInvoiceCommand:
    tenant_id: TenantId
    customer_id: str
    customer_email: str
    currency: str
    lines: tuple[LineInput, ...]
    auto_pay: bool = False


@dataclass(frozen=True, slots=True)
class InvoiceCommand:
    """Issue, pay, void or get one invoice."""

    tenant_id: TenantId
    invoice_id: InvoiceId


@dataclass(frozen=True, slots=True)
class ListInvoicesQuery:
    tenant_id: TenantId
    status: InvoiceStatus | None = None
    customer_id: str | None = None
    limit: int = 50
    after: InvoiceId | None = None
