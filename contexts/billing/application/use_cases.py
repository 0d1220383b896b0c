"""Billing's use cases, one class each."""

from dataclasses import dataclass

from contexts.billing.application.commands import (
    CreateInvoiceCommand,
    InvoiceCommand,
    ListInvoicesQuery,
)
from contexts.billing.application.ports import BillingUnitOfWork, InvoicePage, InvoiceRef
from contexts.billing.domain.invoice import Invoice, InvoiceId, InvoiceLine, InvoicePaid
from contexts.shared.events import InvoicePaidV1
from jobrail.kernel.clock import Clock
from jobrail.kernel.errors import InvalidInputError, NotFoundError
from jobrail.kernel.ids import new_id
from jobrail.kernel.money import Money
from jobrail.ports import EnqueueJobCommand


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
            auto_pay=cmd.auto_pay,
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


PAY_INVOICE_JOB = "billing.pay_invoice"


@dataclass(frozen=True, slots=True)
class AutoPayStarted:
    due: int
    enqueued: int
    """Payments enqueued now; the others already had their job."""


class StartAutoPay:
    """Enqueue a payment (``billing.pay_invoice``) for every invoice due for auto-pay.

    - Due: issued, and created with ``auto_pay``; of every tenant.
    - Each payment runs under its invoice's tenant, with the idempotency key
      ``auto-pay:<invoice id>``: running this again, or twice at once, enqueues no second
      payment for an invoice. (Paying stays idempotent as well: see PayInvoice.)
    - Goes through the due invoices in pages of `page`, one transaction each, so a large
      backlog never makes one long transaction.
    """

    page = 200

    def __init__(self, uow: BillingUnitOfWork) -> None:
        self._uow = uow

    async def __call__(self) -> AutoPayStarted:
        due = enqueued = 0
        after = None
        while True:
            async with self._uow:
                refs = await self._uow.invoices.due_for_auto_pay(after=after, limit=self.page)
                for ref in refs:
                    enqueued += await self._enqueue_payment(ref)
                await self._uow.commit()
            due += len(refs)
            if len(refs) < self.page:
                return AutoPayStarted(due=due, enqueued=enqueued)
            after = refs[-1].invoice_id

    async def _enqueue_payment(self, ref: InvoiceRef) -> bool:
        result = await self._uow.queue.enqueue(
            EnqueueJobCommand(
                tenant_id=ref.tenant_id,
                type=PAY_INVOICE_JOB,
                payload={"invoice_id": str(ref.invoice_id)},
                idempotency_key=f"auto-pay:{ref.invoice_id}",
                entity_id=str(ref.invoice_id),
            )
        )
        return result.created
