"""The month-end run: every draft invoice of a tenant's month issued in one go.

    running ──finish(issued, failed)──► finished

- A tenant has at most one run per month: running it again is the same run.
- Due for a month's run: the tenant's draft invoices created before the month ended
  (older drafts too, which an earlier run could not issue).
- A run cannot start for a month that has not begun.
- A run finishes once, with how many of its invoices were issued and how many were
  not; finishing it again changes nothing and records nothing. A run with nothing due
  finishes as it starts.
"""

import re
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Self

from jobrail.kernel.errors import ConflictError, InvalidInputError
from jobrail.kernel.events import AggregateRoot, DomainEvent
from jobrail.kernel.ids import TenantId

_MONTH = re.compile(r"(\d{4})-(\d{2})")


@dataclass(frozen=True, order=True, slots=True)
class BillingMonth:
    year: int
    month: int

    def __post_init__(self) -> None:
        if not 1 <= self.month <= 12 or not 1 <= self.year <= 9998:
            raise InvalidInputError(f"no such month: {self.year:04d}-{self.month:02d}")

    @classmethod
    def parse(cls, text: str) -> Self:
        """A month written ``YYYY-MM``."""
        match = _MONTH.fullmatch(text)
        if match is None:
            raise InvalidInputError(f"a month is written YYYY-MM, not {text!r}")
        return cls(int(match.group(1)), int(match.group(2)))

    @property
    def starts_at(self) -> datetime:
        return datetime(self.year, self.month, 1, tzinfo=UTC)

    @property
    def ends_at(self) -> datetime:
        """The first instant after the month (UTC)."""
        if self.month == 12:
            return datetime(self.year + 1, 1, 1, tzinfo=UTC)
        return datetime(self.year, self.month + 1, 1, tzinfo=UTC)

    def __str__(self) -> str:
        return f"{self.year:04d}-{self.month:02d}"


class MonthEndRunStatus(StrEnum):
    RUNNING = "running"
    FINISHED = "finished"


class MonthEndRuleError(ConflictError):
    """The month-end run's rules do not allow this."""


@dataclass(frozen=True, kw_only=True)
class MonthEndRunFinished(DomainEvent):
    tenant_id: TenantId
    month: BillingMonth
    due: int
    issued: int
    failed: int
    report_to: str


class MonthEndRun(AggregateRoot):
    def __init__(
        self,
        *,
        tenant_id: TenantId,
        month: BillingMonth,
        due: int,
        report_to: str,
        started_at: datetime,
        batch_id: uuid.UUID | None = None,
        status: MonthEndRunStatus = MonthEndRunStatus.RUNNING,
        issued: int | None = None,
        failed: int | None = None,
        finished_at: datetime | None = None,
    ) -> None:
        super().__init__()
        if due < 0:
            raise InvalidInputError("a run's due invoices are never negative")
        self.tenant_id = tenant_id
        self.month = month
        self.due = due
        self.report_to = report_to
        self.started_at = started_at
        self.batch_id = batch_id
        self.status = status
        self.issued = issued
        self.failed = failed
        self.finished_at = finished_at

    @classmethod
    def start(
        cls, *, tenant_id: TenantId, month: BillingMonth, due: int, report_to: str, now: datetime
    ) -> "MonthEndRun":
        if now < month.starts_at:
            raise MonthEndRuleError(f"the month {month} has not begun: its run cannot start")
        run = cls(tenant_id=tenant_id, month=month, due=due, report_to=report_to, started_at=now)
        if due == 0:
            run.finish(issued=0, failed=0, now=now)
        return run

    def __eq__(self, other: object) -> bool:
        return isinstance(other, MonthEndRun) and (other.tenant_id, other.month) == (
            self.tenant_id,
            self.month,
        )

    def __hash__(self) -> int:
        return hash((self.tenant_id, self.month))

    @property
    def finished(self) -> bool:
        return self.status is MonthEndRunStatus.FINISHED

    def finish(self, *, issued: int, failed: int, now: datetime) -> None:
        """Record how the run's invoices ended. Finishing it again changes nothing."""
        if self.finished:
            return
        if issued < 0 or failed < 0 or issued + failed != self.due:
            raise MonthEndRuleError(
                f"the run of {self.month} had {self.due} invoices due: "
                f"{issued} issued and {failed} failed do not add up to them"
            )
        self.status = MonthEndRunStatus.FINISHED
        self.issued = issued
        self.failed = failed
        self.finished_at = now
        self.record(
            MonthEndRunFinished(
                occurred_at=now,
                tenant_id=self.tenant_id,
                month=self.month,
                due=self.due,
                issued=issued,
                failed=failed,
                report_to=self.report_to,
            )
        )
