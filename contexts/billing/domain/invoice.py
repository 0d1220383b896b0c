"""The invoice aggregate.

    draft ──issue──► issued ──pay──► paid
      │                │
      └──void──► void ◄┘

- An empty invoice cannot be issued.
- A draft or void invoice cannot be paid; paying a paid invoice changes nothing
  and records no second event.
- Amounts are never negative; an invoice has one currency.
- An invoice created with ``auto_pay`` (the customer opted in) is due for auto-pay
  while it is issued: billing's scheduled auto-pay pays it without anyone asking.
- A draft created before a month ended is due for that month's month-end run, which
  issues it (see contexts.billing.domain.month_end).
"""

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import NewType

from contexts.billing.domain.month_end import BillingMonth
from jobrail.kernel.errors import ConflictError, InvalidInputError
from jobrail.kernel.events import AggregateRoot, DomainEvent
from jobrail.kernel.ids import TenantId
from jobrail.kernel.money import Money

InvoiceId = NewType("InvoiceId", uuid.UUID)


class InvoiceStatus(StrEnum):
    DRAFT = "draft"
    ISSUED = "issued"
    PAID = "paid"
    VOID = "void"


class InvoiceRuleError(ConflictError):
    """The invoice's state does not allow this."""


class InvalidInvoiceError(InvalidInputError):
    """The invoice as described breaks a rule of its own (amounts, currency)."""


@dataclass(frozen=True, slots=True)
class InvoiceLine:
    description: str
    quantity: int
    unit_price: Money

    def __post_init__(self) -> None:
        if not self.description.strip():
            raise InvalidInvoiceError("a line needs a description")
        if self.quantity < 1:
            raise InvalidInvoiceError("a line's quantity must be at least 1")
        if self.unit_price.is_negative:
            raise InvalidInvoiceError("amounts are never negative")

    @property
    def total(self) -> Money:
        return self.unit_price.times(self.quantity)


@dataclass(frozen=True, kw_only=True)
class InvoicePaid(DomainEvent):
    invoice_id: InvoiceId
    tenant_id: TenantId
    customer_id: str
    customer_email: str
    total: Money


class Invoice(AggregateRoot):
    def __init__(
        self,
        *,
        id: InvoiceId,
        tenant_id: TenantId,
        customer_id: str,
        customer_email: str,
        currency: str,
        lines: Sequence[InvoiceLine],
        created_at: datetime,
        status: InvoiceStatus = InvoiceStatus.DRAFT,
        issued_at: datetime | None = None,
        paid_at: datetime | None = None,
        voided_at: datetime | None = None,
        auto_pay: bool = False,
    ) -> None:
        super().__init__()
        self.id = id
        self.tenant_id = tenant_id
        self.customer_id = customer_id
        self.customer_email = customer_email
        self.currency = Money.zero(currency).currency
        self.lines = list(lines)
        self.created_at = created_at
        self.status = status
        self.issued_at = issued_at
        self.paid_at = paid_at
        self.voided_at = voided_at
        self.auto_pay = auto_pay
        for line in self.lines:
            if line.unit_price.currency != self.currency:
                raise InvalidInvoiceError(
                    f"one currency per invoice: {line.unit_price.currency} line on a "
                    f"{self.currency} invoice"
                )

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Invoice) and other.id == self.id

    def __hash__(self) -> int:
        return hash(self.id)

    @property
    def total(self) -> Money:
        total = Money.zero(self.currency)
        for line in self.lines:
            total = total + line.total
        return total

    @property
    def due_for_auto_pay(self) -> bool:
        return self.auto_pay and self.status is InvoiceStatus.ISSUED

    def due_for_month_end(self, month: BillingMonth) -> bool:
        return self.status is InvoiceStatus.DRAFT and self.created_at < month.ends_at

    def issue(self, now: datetime) -> None:
        if self.status is not InvoiceStatus.DRAFT:
            raise InvoiceRuleError(f"only a draft invoice can be issued; this one is {self.status}")
        if not self.lines:
            raise InvoiceRuleError("an empty invoice cannot be issued")
        self.status = InvoiceStatus.ISSUED
        self.issued_at = now

    def pay(self, now: datetime) -> None:
        """Pay an issued invoice. Paying it again changes nothing and records nothing."""
        if self.status is InvoiceStatus.PAID:
            return
        if self.status is not InvoiceStatus.ISSUED:
            raise InvoiceRuleError(f"a {self.status} invoice cannot be paid")
        self.status = InvoiceStatus.PAID
        self.paid_at = now
        self.record(
            InvoicePaid(
                occurred_at=now,
                invoice_id=self.id,
                tenant_id=self.tenant_id,
                customer_id=self.customer_id,
                customer_email=self.customer_email,
                total=self.total,
            )
        )

    def void(self, now: datetime) -> None:
        if self.status in (InvoiceStatus.PAID, InvoiceStatus.VOID):
            raise InvoiceRuleError(f"a {self.status} invoice cannot be voided")
        self.status = InvoiceStatus.VOID
        self.voided_at = now
