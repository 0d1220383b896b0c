"""Billing's job types: the same use cases, run by a worker."""

import uuid

from dishka import FromDishka
from pydantic import BaseModel, ConfigDict

from contexts.billing.application.commands import InvoiceCommand
from contexts.billing.application.use_cases import PayInvoice, StartAutoPay
from contexts.billing.domain.invoice import InvoiceId
from jobrail import SYSTEM_TENANT, JobContext, job
from jobrail.kernel.errors import PermanentError


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


class AutoPayPayload(BaseModel):
    model_config = ConfigDict(extra="forbid")


@job(
    "billing.auto_pay", payload=AutoPayPayload, queue="jobs.default", timeout_s=300, max_attempts=3
)
async def auto_pay(
    payload: AutoPayPayload, ctx: JobContext, start: FromDishka[StartAutoPay]
) -> dict[str, int]:
    """Enqueue the payment of every invoice due for auto-pay (scheduled: billing-auto-pay)."""
    if ctx.tenant_id != SYSTEM_TENANT:
        raise PermanentError("billing.auto_pay covers every tenant: only the scheduler runs it")
    started = await start()
    return {"due": started.due, "enqueued": started.enqueued}
