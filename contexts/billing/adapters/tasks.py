"""Billing's job types: the same use cases, run by a worker."""

import uuid

from dishka import FromDishka
from pydantic import BaseModel, ConfigDict, Field

from contexts.billing.application.commands import InvoiceCommand
from contexts.billing.application.month_end import (
    FINISH_MONTH_END_JOB,
    ISSUE_INVOICE_JOB,
    FinishMonthEndCommand,
    FinishMonthEndRun,
    IssueInvoiceForRun,
)
from contexts.billing.application.use_cases import PayInvoice, StartAutoPay
from contexts.billing.domain.invoice import InvoiceId, InvoiceStatus
from contexts.billing.domain.month_end import BillingMonth
from jobrail import SYSTEM_TENANT, JobContext, job
from jobrail.kernel.errors import DomainError, PermanentError


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


class IssueInvoicePayload(BaseModel):
    model_config = ConfigDict(extra="forbid")

    invoice_id: uuid.UUID


@job(ISSUE_INVOICE_JOB, payload=IssueInvoicePayload, queue="jobs.default", timeout_s=30)
async def issue_invoice(
    payload: IssueInvoicePayload, ctx: JobContext, issue: FromDishka[IssueInvoiceForRun]
) -> dict[str, str]:
    """Issue one invoice of a month-end run (a member of its batch)."""
    try:
        invoice = await issue(InvoiceCommand(ctx.tenant_id, InvoiceId(payload.invoice_id)))
    except DomainError as refused:
        # An empty or void invoice stays so whatever the retries: the run counts it failed.
        raise PermanentError(str(refused)) from refused
    return {"invoice_id": str(invoice.id), "status": invoice.status.value}


class FinishMonthEndPayload(BaseModel):
    model_config = ConfigDict(extra="forbid")

    month: str = Field(pattern=r"^\d{4}-\d{2}$")


@job(FINISH_MONTH_END_JOB, payload=FinishMonthEndPayload, queue="jobs.default", timeout_s=60)
async def finish_month_end(
    payload: FinishMonthEndPayload, ctx: JobContext, finish: FromDishka[FinishMonthEndRun]
) -> dict[str, int | str]:
    """A month-end run's `finally` callback: count how its invoices ended (the batch's
    results) and finish the run, which publishes its summary."""
    results = await ctx.flow_results()
    issued = sum(1 for result in results if result and result.get("status") == InvoiceStatus.ISSUED)
    run = await finish(
        FinishMonthEndCommand(
            ctx.tenant_id,
            BillingMonth.parse(payload.month),
            issued=issued,
            failed=len(results) - issued,
        )
    )
    return {"month": str(run.month), "issued": run.issued or 0, "failed": run.failed or 0}
