"""Billing's job types: the same use cases, run by a worker."""

import uuid

from dishka import FromDishka
from pydantic import BaseModel, ConfigDict

from contexts.billing.application.commands import InvoiceCommand
from contexts.billing.application.use_cases import PayInvoice
from contexts.billing.domain.invoice import InvoiceId
from jobrail.jobs.context import JobContext
from jobrail.jobs.registry import job


class PayInvoicePayload(BaseModel):
    model_config = ConfigDict(extra="forbid")

    invoice_id: uuid.UUID


@job("billing.pay_invoice", payload=PayInvoicePayload, queue="jobs.default", timeout_s=30)
async def pay_invoice(
    payload: PayInvoicePayload, ctx: JobContext, pay: FromDishka[PayInvoice]
) -> dict[str, str]:
    """Pay an invoice from a worker (scheduled auto-pay): the same PayInvoice as the route."""
    invoice = await pay(InvoiceCommand(ctx.tenant_id, InvoiceId(payload.invoice_id)))
    return {"invoice_id": str(invoice.id), "status": invoice.status.value}
