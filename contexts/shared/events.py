"""Integration events: the contracts between contexts. Versioned; never changed in
place (a change is a new ``.vN``)."""

from dataclasses import dataclass
from typing import ClassVar

from jobrail.kernel.events import IntegrationEvent


@dataclass(frozen=True, kw_only=True)
class InvoicePaidV1(IntegrationEvent):
    name: ClassVar[str] = "invoice.paid.v1"
    invoice_id: str
    customer_id: str
    customer_email: str
    amount_minor: int
    currency: str


@dataclass(frozen=True, kw_only=True)
class MonthEndRunFinishedV1(IntegrationEvent):
    name: ClassVar[str] = "month_end_run.finished.v1"
    month: str
    """``YYYY-MM``."""
    due: int
    issued: int
    failed: int
    report_to: str
    """Who is told how the run went (an e-mail address)."""
