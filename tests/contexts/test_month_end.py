"""Billing's month-end run: the domain alone, then its use cases with fakes (assertions
on state: the run, the batch it started, the events it published)."""

import uuid
from datetime import UTC, datetime, timedelta

import pytest

from contexts.billing.application.commands import CreateInvoiceCommand, InvoiceCommand, LineInput
from contexts.billing.application.month_end import (
    FINISH_MONTH_END_JOB,
    ISSUE_INVOICE_JOB,
    FinishMonthEndCommand,
    FinishMonthEndRun,
    IssueInvoiceForRun,
    MonthEndCommand,
    StartMonthEndRun,
)
from contexts.billing.application.use_cases import CreateInvoice, IssueInvoice, VoidInvoice
from contexts.billing.domain.invoice import (
    Invoice,
    InvoiceId,
    InvoiceLine,
    InvoiceRuleError,
    InvoiceStatus,
)
from contexts.billing.domain.month_end import (
    BillingMonth,
    MonthEndRuleError,
    MonthEndRun,
    MonthEndRunFinished,
    MonthEndRunStatus,
)
from contexts.notifications.application.use_cases import (
    SendMonthEndSummary,
    SendMonthEndSummaryCommand,
)
from contexts.shared.events import MonthEndRunFinishedV1
from jobrail.kernel.errors import InvalidInputError
from jobrail.kernel.ids import TenantId
from jobrail.kernel.money import Money
from jobrail.ports import BatchCommand
from tests.contexts.fakes import (
    FakeBillingUnitOfWork,
    FakeEmailSender,
    FakeNotificationsUnitOfWork,
)
from tests.fakes import START, FixedClock

ACME = TenantId("acme")
NOVEMBER = BillingMonth(2026, 11)  # START is in it


def _run(due: int = 3) -> MonthEndRun:
    return MonthEndRun.start(
        tenant_id=ACME, month=NOVEMBER, due=due, report_to="finance@acme.example", now=START
    )


# The domain


def test_a_month_is_written_yyyy_mm_and_ends_where_the_next_begins() -> None:
    december = BillingMonth.parse("2026-12")

    assert str(december) == "2026-12"
    assert december.starts_at == datetime(2026, 12, 1, tzinfo=UTC)
    assert december.ends_at == datetime(2027, 1, 1, tzinfo=UTC)
    assert NOVEMBER.ends_at == december.starts_at
    for text in ("2026-13", "2026-00", "2026-1", "26-11", "2026-11-01"):
        with pytest.raises(InvalidInputError):
            BillingMonth.parse(text)


def test_a_draft_created_before_the_month_ended_is_due_for_its_run() -> None:
    def draft(created_at: datetime) -> Invoice:
        return Invoice(
            id=InvoiceId(uuid.uuid4()),
            tenant_id=ACME,
            customer_id="c1",
            customer_email="c1@example.com",
            currency="EUR",
            lines=[InvoiceLine("widget", 1, Money(100, "EUR"))],
            created_at=created_at,
        )

    old, last_moment = draft(START - timedelta(days=90)), draft(NOVEMBER.ends_at - timedelta(0, 1))
    issued = draft(START)
    issued.issue(START)

    assert old.due_for_month_end(NOVEMBER)
    assert last_moment.due_for_month_end(NOVEMBER)
    assert not draft(NOVEMBER.ends_at).due_for_month_end(NOVEMBER)
    assert not issued.due_for_month_end(NOVEMBER)


def test_a_run_finishes_once_with_figures_that_add_up_to_its_due_invoices() -> None:
    run = _run(due=3)
    assert run.status is MonthEndRunStatus.RUNNING
    assert run.pull_events() == []

    with pytest.raises(MonthEndRuleError, match="do not add up"):
        run.finish(issued=3, failed=1, now=START)
    run.finish(issued=2, failed=1, now=START)
    run.finish(issued=3, failed=0, now=START)  # again: nothing changes

    assert (run.status, run.issued, run.failed) == (MonthEndRunStatus.FINISHED, 2, 1)
    [event] = run.pull_events()
    assert isinstance(event, MonthEndRunFinished)
    assert (event.due, event.issued, event.failed, event.month) == (3, 2, 1, NOVEMBER)


def test_a_run_with_nothing_due_finishes_as_it_starts() -> None:
    run = _run(due=0)

    assert run.finished
    [event] = run.pull_events()
    assert isinstance(event, MonthEndRunFinished)
    assert (event.issued, event.failed) == (0, 0)


def test_a_run_cannot_start_before_its_month_begins() -> None:
    with pytest.raises(MonthEndRuleError, match="has not begun"):
        MonthEndRun.start(
            tenant_id=ACME,
            month=BillingMonth(2026, 12),
            due=1,
            report_to="finance@acme.example",
            now=START,
        )


# The use cases


async def _draft(uow: FakeBillingUnitOfWork, clock: FixedClock, *, lines: int = 1) -> InvoiceId:
    invoice = await CreateInvoice(uow, clock)(
        CreateInvoiceCommand(
            ACME,
            "c1",
            "c1@example.com",
            "EUR",
            tuple(LineInput("widget", 1, 1000) for _ in range(lines)),
        )
    )
    clock.advance(timedelta(minutes=1))  # the run takes them oldest first
    return invoice.id


def _start_cmd(report_to: str = "finance@acme.example") -> MonthEndCommand:
    return MonthEndCommand(ACME, NOVEMBER, report_to)


async def test_starting_the_run_starts_one_batch_of_the_due_invoices_with_the_run() -> None:
    uow, clock = FakeBillingUnitOfWork(), FixedClock()
    due = [await _draft(uow, clock), await _draft(uow, clock, lines=0)]
    issued = await _draft(uow, clock)
    await IssueInvoice(uow, clock)(InvoiceCommand(ACME, issued))
    voided = await _draft(uow, clock)
    await VoidInvoice(uow, clock)(InvoiceCommand(ACME, voided))
    clock.advance(timedelta(days=1))  # into December: a draft of December is not due
    await _draft(uow, clock)
    commits = uow.commits

    started = await StartMonthEndRun(uow, clock)(_start_cmd())

    assert started.created
    assert uow.commits == commits + 1
    [(cmd, flow)] = uow.committed_flows
    assert isinstance(cmd, BatchCommand)
    assert [(j.type, j.payload) for j in cmd.jobs] == [
        (ISSUE_INVOICE_JOB, {"invoice_id": str(i)}) for i in due
    ]
    assert cmd.finally_ is not None
    assert cmd.then is None
    assert (cmd.finally_.type, cmd.finally_.payload) == (FINISH_MONTH_END_JOB, {"month": "2026-11"})
    assert cmd.idempotency_key == "month-end:2026-11"
    run = uow.runs[(ACME, NOVEMBER)]
    assert (run.due, run.batch_id, run.status) == (2, flow.flow.id, MonthEndRunStatus.RUNNING)
    assert uow.committed_events == []  # the summary comes when the batch has ended


async def test_starting_the_run_again_for_the_month_starts_nothing() -> None:
    uow, clock = FakeBillingUnitOfWork(), FixedClock()
    await _draft(uow, clock)
    first = await StartMonthEndRun(uow, clock)(_start_cmd())
    await _draft(uow, clock)

    again = await StartMonthEndRun(uow, clock)(_start_cmd("someone@else.example"))

    assert not again.created
    assert again.run.batch_id == first.run.batch_id
    assert (again.run.due, again.run.report_to) == (1, "finance@acme.example")
    assert len(uow.committed_flows) == 1


async def test_a_run_with_nothing_due_publishes_its_summary_at_once() -> None:
    uow, clock = FakeBillingUnitOfWork(), FixedClock()

    started = await StartMonthEndRun(uow, clock)(_start_cmd())

    assert started.run.finished
    assert uow.committed_flows == []
    [event] = uow.committed_events
    assert isinstance(event, MonthEndRunFinishedV1)
    assert (event.month, event.due, event.issued, event.failed) == ("2026-11", 0, 0, 0)


async def test_finishing_the_run_publishes_its_figures_once() -> None:
    uow, clock = FakeBillingUnitOfWork(), FixedClock()
    for _ in range(3):
        await _draft(uow, clock)
    await StartMonthEndRun(uow, clock)(_start_cmd())
    finish = FinishMonthEndRun(uow, clock)

    await finish(FinishMonthEndCommand(ACME, NOVEMBER, issued=2, failed=1))
    await finish(FinishMonthEndCommand(ACME, NOVEMBER, issued=2, failed=1))  # a retry

    [event] = uow.committed_events
    assert isinstance(event, MonthEndRunFinishedV1)
    assert (event.due, event.issued, event.failed) == (3, 2, 1)
    assert event.report_to == "finance@acme.example"
    assert uow.runs[(ACME, NOVEMBER)].finished


async def test_issuing_for_the_run_issues_a_draft_and_takes_an_issued_one_as_it_is() -> None:
    uow, clock = FakeBillingUnitOfWork(), FixedClock()
    draft, empty = await _draft(uow, clock), await _draft(uow, clock, lines=0)
    issue = IssueInvoiceForRun(uow, clock)

    first = await issue(InvoiceCommand(ACME, draft))
    issued_at = clock.now()
    clock.advance(timedelta(hours=1))
    again = await issue(InvoiceCommand(ACME, draft))  # an attempt whose end was lost

    assert first.status is again.status is InvoiceStatus.ISSUED
    assert uow.store[draft].issued_at == issued_at
    with pytest.raises(InvoiceRuleError, match="empty"):
        await issue(InvoiceCommand(ACME, empty))
    assert uow.store[empty].status is InvoiceStatus.DRAFT


async def test_the_summary_is_sent_once_with_the_runs_figures() -> None:
    uow, sender, clock = FakeNotificationsUnitOfWork(), FakeEmailSender(), FixedClock()
    send = SendMonthEndSummary(uow, sender, clock)
    cmd = SendMonthEndSummaryCommand(ACME, "e1", "2026-11", "finance@acme.example", 5, 4, 1)

    await send(cmd)
    await send(cmd)  # the event delivered twice

    [message] = sender.sent
    assert message.recipient == "finance@acme.example"
    assert message.subject == "Month-end run 2026-11: 4 of 5 invoices issued"
    assert "Invoices due: 5\nIssued: 4\nNot issued: 1\n" in message.body
    [notification] = uow.store.values()
    assert (notification.template, notification.subject_id) == ("month_end_summary", "2026-11")
