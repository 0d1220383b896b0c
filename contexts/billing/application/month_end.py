"""The month-end run's use cases: start it, issue each of its invoices, finish it."""

from dataclasses import dataclass

from contexts.billing.application.commands import InvoiceCommand
from contexts.billing.application.ports import BillingUnitOfWork
from contexts.billing.domain.invoice import Invoice, InvoiceStatus
from contexts.billing.domain.month_end import BillingMonth, MonthEndRun, MonthEndRunFinished
from contexts.shared.events import MonthEndRunFinishedV1
from jobrail.kernel.clock import Clock
from jobrail.kernel.errors import NotFoundError
from jobrail.kernel.ids import TenantId
from jobrail.ports import BatchCommand, FlowJob

ISSUE_INVOICE_JOB = "billing.issue_invoice"
FINISH_MONTH_END_JOB = "billing.finish_month_end"


@dataclass(frozen=True, slots=True)
class MonthEndCommand:
    tenant_id: TenantId
    month: BillingMonth
    report_to: str
    """Who is told how the run went (an e-mail address)."""


@dataclass(frozen=True, slots=True)
class MonthEndQuery:
    tenant_id: TenantId
    month: BillingMonth


@dataclass(frozen=True, slots=True)
class MonthEndRunStarted:
    run: MonthEndRun
    created: bool
    """False: the month's run had started already; nothing new was started."""


@dataclass(frozen=True, slots=True)
class FinishMonthEndCommand:
    tenant_id: TenantId
    month: BillingMonth
    issued: int
    failed: int


class StartMonthEndRun:
    """Start the tenant's month-end run: issue every invoice due for the month.

    - Due: the tenant's drafts created before the month ended (see Invoice).
    - One batch, with one ``billing.issue_invoice`` per due invoice and a ``finally``
      callback (``billing.finish_month_end``) that counts how they ended, finishes the
      run and publishes ``month_end_run.finished.v1``, once.
    - The run's record and its batch commit together, or neither does.
    - Once per tenant and month: starting it again returns the run already started and
      starts nothing (the batch's idempotency key is ``month-end:<month>`` too).
    - A run with nothing due finishes at once and publishes its summary all the same.
    - A run cannot start for a month that has not begun.
    """

    def __init__(self, uow: BillingUnitOfWork, clock: Clock) -> None:
        self._uow = uow
        self._clock = clock

    async def __call__(self, cmd: MonthEndCommand) -> MonthEndRunStarted:
        async with self._uow:
            due = await self._uow.invoices.due_for_month_end(cmd.tenant_id, cmd.month)
            run = MonthEndRun.start(
                tenant_id=cmd.tenant_id,
                month=cmd.month,
                due=len(due),
                report_to=cmd.report_to,
                now=self._clock.now(),
            )
            if not await self._uow.month_end_runs.add(run):
                existing = await self._uow.month_end_runs.get(cmd.tenant_id, cmd.month)
                if existing is None:
                    raise NotFoundError(f"the month-end run of {cmd.month} vanished")
                return MonthEndRunStarted(existing, created=False)
            if due:
                started = await self._uow.workflows.batch(
                    BatchCommand(
                        tenant_id=cmd.tenant_id,
                        jobs=[
                            FlowJob(ISSUE_INVOICE_JOB, {"invoice_id": str(i)}, entity_id=str(i))
                            for i in due
                        ],
                        finally_=FlowJob(FINISH_MONTH_END_JOB, {"month": str(cmd.month)}),
                        idempotency_key=f"month-end:{cmd.month}",
                        name=f"month-end run {cmd.month}",
                    )
                )
                run.batch_id = started.flow.id
                await self._uow.month_end_runs.save(run)
            await _publish(self._uow, run)
            await self._uow.commit()
        return MonthEndRunStarted(run, created=True)


class IssueInvoiceForRun:
    """Issue an invoice that a month-end run found due.

    - A draft is issued.
    - One already issued is returned as it is: issued by hand since the run started,
      or by an attempt of this job whose end was not recorded.
    - An empty or void invoice cannot be issued (InvoiceRuleError).
    """

    def __init__(self, uow: BillingUnitOfWork, clock: Clock) -> None:
        self._uow = uow
        self._clock = clock

    async def __call__(self, cmd: InvoiceCommand) -> Invoice:
        async with self._uow:
            invoice = await self._uow.invoices.get(cmd.tenant_id, cmd.invoice_id, for_update=True)
            if invoice is None:
                raise NotFoundError(f"invoice {cmd.invoice_id} not found")
            if invoice.status is InvoiceStatus.ISSUED:
                return invoice
            invoice.issue(self._clock.now())
            await self._uow.invoices.save(invoice)
            await self._uow.commit()
        return invoice


class FinishMonthEndRun:
    """Finish a month-end run with how its invoices ended, and publish
    ``month_end_run.finished.v1`` (once: finishing it again publishes nothing)."""

    def __init__(self, uow: BillingUnitOfWork, clock: Clock) -> None:
        self._uow = uow
        self._clock = clock

    async def __call__(self, cmd: FinishMonthEndCommand) -> MonthEndRun:
        async with self._uow:
            run = await self._uow.month_end_runs.get(cmd.tenant_id, cmd.month, for_update=True)
            if run is None:
                raise NotFoundError(f"no month-end run of {cmd.month}")
            run.finish(issued=cmd.issued, failed=cmd.failed, now=self._clock.now())
            await _publish(self._uow, run)
            await self._uow.month_end_runs.save(run)
            await self._uow.commit()
        return run


class GetMonthEndRun:
    """The tenant's month-end run of a month; not found before it started."""

    def __init__(self, uow: BillingUnitOfWork) -> None:
        self._uow = uow

    async def __call__(self, query: MonthEndQuery) -> MonthEndRun:
        async with self._uow:
            run = await self._uow.month_end_runs.get(query.tenant_id, query.month)
        if run is None:
            raise NotFoundError(f"no month-end run of {query.month}")
        return run


async def _publish(uow: BillingUnitOfWork, run: MonthEndRun) -> None:
    for event in run.pull_events():
        if isinstance(event, MonthEndRunFinished):
            await uow.events.publish(
                MonthEndRunFinishedV1(
                    tenant_id=event.tenant_id,
                    occurred_at=event.occurred_at,
                    month=str(event.month),
                    due=event.due,
                    issued=event.issued,
                    failed=event.failed,
                    report_to=event.report_to,
                )
            )
