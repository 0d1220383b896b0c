"""Billing's invariants, on the aggregate alone (no test doubles)."""

import uuid

import pytest

from contexts.billing.domain.invoice import (
    InvalidInvoiceError,
    Invoice,
    InvoiceId,
    InvoiceLine,
    InvoicePaid,
    InvoiceRuleError,
    InvoiceStatus,
)
from jobrail.kernel.ids import TenantId
from jobrail.kernel.money import Money
from tests.fakes import START


def invoice(*lines: InvoiceLine, currency: str = "EUR") -> Invoice:
    return Invoice(
        id=InvoiceId(uuid.uuid4()),
        tenant_id=TenantId("acme"),
        customer_id="c1",
        customer_email="c1@example.com",
        currency=currency,
        lines=lines,
        created_at=START,
    )


def line(quantity: int = 2, price: int = 1250, currency: str = "EUR") -> InvoiceLine:
    return InvoiceLine("widget", quantity, Money(price, currency))


def test_the_total_is_the_sum_of_quantity_times_unit_price() -> None:
    assert invoice(line(2, 1250), line(1, 99)).total == Money(2599, "EUR")


def test_an_empty_invoice_cannot_be_issued() -> None:
    draft = invoice()

    with pytest.raises(InvoiceRuleError, match="empty"):
        draft.issue(START)
    assert draft.status is InvoiceStatus.DRAFT


@pytest.mark.parametrize("status", ["draft", "void"])
def test_a_draft_or_void_invoice_cannot_be_paid(status: str) -> None:
    target = invoice(line())
    if status == "void":
        target.void(START)

    with pytest.raises(InvoiceRuleError, match=f"a {status} invoice cannot be paid"):
        target.pay(START)
    assert target.pull_events() == []


def test_paying_records_one_paid_event() -> None:
    target = invoice(line())
    target.issue(START)

    target.pay(START)

    assert target.status is InvoiceStatus.PAID
    [event] = target.pull_events()
    assert isinstance(event, InvoicePaid)
    assert event.total == Money(2500, "EUR")


def test_paying_a_paid_invoice_changes_nothing_and_records_no_second_event() -> None:
    target = invoice(line())
    target.issue(START)
    target.pay(START)
    target.pull_events()
    paid_at = target.paid_at

    target.pay(START.replace(hour=23))

    assert target.status is InvoiceStatus.PAID
    assert target.paid_at == paid_at
    assert target.pull_events() == []


def test_amounts_are_never_negative() -> None:
    with pytest.raises(InvalidInvoiceError, match="never negative"):
        line(price=-1)


def test_a_line_needs_a_quantity_of_at_least_one() -> None:
    with pytest.raises(InvalidInvoiceError, match="quantity"):
        line(quantity=0)


def test_an_invoice_has_one_currency() -> None:
    with pytest.raises(InvalidInvoiceError, match="one currency"):
        invoice(line(currency="EUR"), line(currency="USD"))


def test_a_paid_invoice_cannot_be_voided_but_an_issued_one_can() -> None:
    paid = invoice(line())
    paid.issue(START)
    paid.pay(START)
    issued = invoice(line())
    issued.issue(START)

    with pytest.raises(InvoiceRuleError):
        paid.void(START)
    issued.void(START)
    assert issued.status is InvoiceStatus.VOID


def test_only_a_draft_is_issued() -> None:
    issued = invoice(line())
    issued.issue(START)

    with pytest.raises(InvoiceRuleError, match="only a draft"):
        issued.issue(START)


def test_money_refuses_to_mix_currencies_and_non_integers() -> None:
    with pytest.raises(ValueError, match="cannot mix"):
        Money(1, "EUR") + Money(1, "USD")
    with pytest.raises(TypeError):
        Money(1.5, "EUR")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="ISO 4217"):
        Money(1, "euro")
