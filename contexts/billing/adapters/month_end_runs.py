"""Month-end runs in SQL: one row per tenant and month."""

from typing import Any

from sqlalchemy import Column, Integer, String, Table, Uuid, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from contexts.billing.domain.month_end import BillingMonth, MonthEndRun, MonthEndRunStatus
from contexts.schema import metadata
from jobrail.kernel.ids import TenantId
from jobrail.sql import UtcDateTime, database_errors, upsert_insert

month_end_runs = Table(
    "billing_month_end_runs",
    metadata,
    Column("tenant_id", String(64), primary_key=True),
    Column("month", String(7), primary_key=True),
    Column("status", String(16), nullable=False),
    Column("due", Integer, nullable=False),
    Column("report_to", String(320), nullable=False),
    Column("batch_id", Uuid),
    Column("issued", Integer),
    Column("failed", Integer),
    Column("started_at", UtcDateTime, nullable=False),
    Column("finished_at", UtcDateTime),
)


def _state(run: MonthEndRun) -> dict[str, Any]:
    return {
        "status": run.status.value,
        "batch_id": run.batch_id,
        "issued": run.issued,
        "failed": run.failed,
        "finished_at": run.finished_at,
    }


def _run(row: Any) -> MonthEndRun:
    return MonthEndRun(
        tenant_id=TenantId(row.tenant_id),
        month=BillingMonth.parse(row.month),
        due=row.due,
        report_to=row.report_to,
        started_at=row.started_at,
        batch_id=row.batch_id,
        status=MonthEndRunStatus(row.status),
        issued=row.issued,
        failed=row.failed,
        finished_at=row.finished_at,
    )


class SqlaMonthEndRunRepository:
    def __init__(self, session: AsyncSession) -> None:
        self._session = session

    async def add(self, run: MonthEndRun) -> bool:
        statement = (
            upsert_insert(self._session.get_bind().dialect.name, month_end_runs)
            .values(
                tenant_id=run.tenant_id,
                month=str(run.month),
                due=run.due,
                report_to=run.report_to,
                started_at=run.started_at,
                **_state(run),
            )
            .on_conflict_do_nothing(index_elements=["tenant_id", "month"])
            .returning(month_end_runs.c.tenant_id)
        )
        with database_errors():
            inserted = (await self._session.execute(statement)).scalar_one_or_none()
        return inserted is not None

    async def get(
        self, tenant_id: TenantId, month: BillingMonth, *, for_update: bool = False
    ) -> MonthEndRun | None:
        query = select(month_end_runs).where(
            month_end_runs.c.tenant_id == tenant_id, month_end_runs.c.month == str(month)
        )
        if for_update:
            query = query.with_for_update()
        with database_errors():
            row = (await self._session.execute(query)).first()
        return _run(row) if row is not None else None

    async def save(self, run: MonthEndRun) -> None:
        with database_errors():
            await self._session.execute(
                update(month_end_runs)
                .where(
                    month_end_runs.c.tenant_id == run.tenant_id,
                    month_end_runs.c.month == str(run.month),
                )
                .values(_state(run))
            )
