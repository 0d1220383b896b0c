"""Billing's use cases, one class each."""

from contexts.billing.application.commands import (
    CreateInvoiceCommand,
    InvoiceCommand,
    ListInvoicesQuery,
)
from contexts.billing.application.ports import BillingUnitOfWork, InvoicePage
from contexts.billing.domain.invoice import Invoice, InvoiceId, InvoiceLine, InvoicePaid
from contexts.shared.events import InvoicePaidV1
from jobrail.kernel.clock import Clock
from jobrail.kernel.errors import InvalidInputError, NotFoundError
from jobrail.kernel.ids import new_id
from jobrail.kernel.money import Money


class CreateInvoice:
    """Create a draft invoice.

    - Lines have a description, a quantity of at least 1 and a non-negative unit price.
    - All amounts are in the invoice's currency, in integer minor units.
    """

    def __init__(self, uow: BillingUnitOfWork, clock: Clock) -> None:
        self._uow = uow
        self._clock = clock

    async def __call__(self, cmd: CreateInvoiceCommand) -> Invoice:
        try:
            lines = [
                InvoiceLine(
                    line.description, line.quantity, Money(line.unit_price_minor, cmd.currency)
                )
                for line in cmd.lines
            ]
        except (TypeError, ValueError) as exc:
            raise InvalidInputError(str(exc)) from None
        invoice = Invoice(
            id=InvoiceId(new_id()),
            tenant_id=cmd.tenant_id,
            customer_id=cmd.customer_id,
            customer_email=cmd.customer_email,
            currency=cmd.currency,
            lines=lines,
            created_at=self._clock.now(),
        )
        async with self._uow:
            await self._uow.invoices.add(invoice)
            await self._uow.commit()
        return invoice


class _ChangeInvoice:
    def __init__(self, uow: BillingUnitOfWork, clock: Clock) -> None:
        self._uow = uow
        self._clock = clock

    async def _load(self, cmd: InvoiceCommand) -> Invoice:
        invoice = await self._uow.invoices.get(cmd.tenant_id, cmd.invoice_id, for_update=True)
        if invoice is None:
            raise NotFoundError(f"invoice {cmd.invoice_id} not found")
        return invoice


class IssueInvoice(_ChangeInvoice):
    """Issue a draft invoice. An empty invoice cannot be issued."""

    async def __call__(self, cmd: InvoiceCommand) -> Invoice:
        async with self._uow:
            invoice = await self._load(cmd)
            invoice.issue(self._clock.now())
            await self._uow.invoices.save(invoice)
            await self._uow.commit()
        return invoice


class PayInvoice(_ChangeInvoice):
    """Pay an issued invoice and publish ``invoice.paid.v1``.

    - A draft or void invoice cannot be paid.
    - Paying a paid invoice returns it unchanged and publishes nothing.
    """

    async def __call__(self, cmd: InvoiceCommand) -> Invoice:
        async with self._uow:
            invoice = await self._load(cmd)
            invoice.pay(self._clock.now())
            for event in invoice.pull_events():
                if isinstance(event, InvoicePaid):
                    await self._uow.events.publish(
                        InvoicePaidV1(
                            tenant_id=event.tenant_id,
                            occurred_at=event.occurred_at,
                            invoice_id=str(event.invoice_id),
                            customer_id=event.customer_id,
                            customer_email=event.customer_email,
                            amount_minor=event.total.amount_minor,
                            currency=event.total.currency,
                        )
                    )
            await self._uow.invoices.save(invoice)
            await self._uow.commit()
        return invoice


class VoidInvoice(_ChangeInvoice):
    """Void a draft or issued invoice. A paid invoice cannot be voided."""

    async def __call__(self, cmd: InvoiceCommand) -> Invoice:
        async with self._uow:
            invoice = await self._load(cmd)
            invoice.void(self._clock.now())
            await self._uow.invoices.save(invoice)
            await self._uow.commit()
        return invoice


class GetInvoice:
    """One of the tenant's invoices; another tenant's is not found."""

    def __init__(self, uow: BillingUnitOfWork) -> None:
        self._uow = uow

    async def __call__(self, cmd: InvoiceCommand) -> Invoice:
        async with self._uow:
            invoice = await self._uow.invoices.get(cmd.tenant_id, cmd.invoice_id)
        if invoice is None:
            raise NotFoundError(f"invoice {cmd.invoice_id} not found")
        return invoice


class ListInvoices:
    """The tenant's invoices, newest first, by status and customer; at most 200 a page."""

    def __init__(self, uow: BillingUnitOfWork) -> None:
        self._uow = uow

    async def __call__(self, query: ListInvoicesQuery) -> InvoicePage:
        if not 1 <= query.limit <= 200:
            raise InvalidInputError("limit must be between 1 and 200")
        async with self._uow:
            return await self._uow.invoices.list(
                query.tenant_id,
                status=query.status,
                customer_id=query.customer_id,
                limit=query.limit,
                after=query.after,
            )
