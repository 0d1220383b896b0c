"""Invoices in SQL (imperative mapping: the domain knows nothing of tables)."""

from collections.abc import Sequence
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    Column,
    ForeignKey,
    Index,
    Integer,
    String,
    Table,
    Text,
    Uuid,
    insert,
    select,
    text,
    update,
)
from sqlalchemy.ext.asyncio import AsyncSession

from contexts.billing.adapters.month_end_runs import SqlaMonthEndRunRepository
from contexts.billing.application.ports import InvoicePage, InvoiceRef
from contexts.billing.domain.invoice import (
    Invoice,
    InvoiceId,
    InvoiceLine,
    InvoiceStatus,
)
from contexts.billing.domain.month_end import BillingMonth
from contexts.schema import metadata
from jobrail.kernel.ids import TenantId
from jobrail.kernel.money import Money
from jobrail.sql import SqlaUnitOfWork, UtcDateTime, database_errors

AUTO_PAY_DUE = "status = 'issued' AND auto_pay"

invoices = Table(
    "billing_invoices",
    metadata,
    Column("id", Uuid, primary_key=True),
    Column("tenant_id", String(64), nullable=False),
    Column("customer_id", String(255), nullable=False),
    Column("customer_email", String(320), nullable=False),
    Column("currency", String(3), nullable=False),
    Column("status", String(16), nullable=False),
    Column("total_minor", BigInteger, nullable=False),
    Column("created_at", UtcDateTime, nullable=False),
    Column("issued_at", UtcDateTime),
    Column("paid_at", UtcDateTime),
    Column("voided_at", UtcDateTime),
    Column("auto_pay", Boolean, nullable=False, server_default=text("false")),
    CheckConstraint("total_minor >= 0", name="total_not_negative"),
    Index("ix_billing_invoices_tenant_id", "tenant_id", "id"),
    Index("ix_billing_invoices_tenant_status", "tenant_id", "status", "id"),
    Index("ix_billing_invoices_tenant_customer", "tenant_id", "customer_id", "id"),
    # Auto-pay's access path: the few invoices due for it, of every tenant.
    Index(
        "ix_billing_invoices_auto_pay_due",
        "id",
        postgresql_where=text(AUTO_PAY_DUE),
        sqlite_where=text(AUTO_PAY_DUE),
    ),
)

invoice_lines = Table(
    "billing_invoice_lines",
    metadata,
    Column(
        "invoice_id",
        Uuid,
        ForeignKey("billing_invoices.id", ondelete="CASCADE", name="fk_billing_lines_invoice"),
        primary_key=True,
    ),
    Column("position", Integer, primary_key=True),
    Column("description", Text, nullable=False),
    Column("quantity", Integer, nullable=False),
    Column("unit_price_minor", BigInteger, nullable=False),
    CheckConstraint("quantity >= 1", name="quantity_positive"),
    CheckConstraint("unit_price_minor >= 0", name="price_not_negative"),
)


def _state(invoice: Invoice) -> dict[str, Any]:
    return {
        "status": invoice.status.value,
        "total_minor": invoice.total.amount_minor,
        "issued_at": invoice.issued_at,
        "paid_at": invoice.paid_at,
        "voided_at": invoice.voided_at,
    }


def _invoice(row: Any, lines: list[Any]) -> Invoice:
    return Invoice(
        id=InvoiceId(row.id),
        tenant_id=TenantId(row.tenant_id),
        customer_id=row.customer_id,
        customer_email=row.customer_email,
        currency=row.currency,
        lines=[
            InvoiceLine(line.description, line.quantity, Money(line.unit_price_minor, row.currency))
            for line in sorted(lines, key=lambda line: line.position)
        ],
        created_at=row.created_at,
        status=InvoiceStatus(row.status),
        issued_at=row.issued_at,
        paid_at=row.paid_at,
        voided_at=row.voided_at,
        auto_pay=row.auto_pay,
    )


class SqlaInvoiceRepository:
    def __init__(self, session: AsyncSession) -> None:
        self._session = session

    async def add(self, invoice: Invoice) -> None:
        with database_errors():
            await self._session.execute(
                insert(invoices).values(
                    id=invoice.id,
                    tenant_id=invoice.tenant_id,
                    customer_id=invoice.customer_id,
                    customer_email=invoice.customer_email,
                    currency=invoice.currency,
                    created_at=invoice.created_at,
                    auto_pay=invoice.auto_pay,
                    **_state(invoice),
                )
            )
            if invoice.lines:
                await self._session.execute(
                    insert(invoice_lines),
                    [
                        {
                            "invoice_id": invoice.id,
                            "position": position,
                            "description": line.description,
                            "quantity": line.quantity,
                            "unit_price_minor": line.unit_price.amount_minor,
                        }
                        for position, line in enumerate(invoice.lines)
                    ],
                )

    async def get(
        self, tenant_id: TenantId, invoice_id: InvoiceId, *, for_update: bool = False
    ) -> Invoice | None:
        query = select(invoices).where(
            invoices.c.id == invoice_id, invoices.c.tenant_id == tenant_id
        )
        if for_update:
            query = query.with_for_update()
        with database_errors():
            row = (await self._session.execute(query)).first()
            if row is None:
                return None
            lines = (
                await self._session.execute(
                    select(invoice_lines).where(invoice_lines.c.invoice_id == invoice_id)
                )
            ).all()
        return _invoice(row, list(lines))

    async def list(
        self,
        tenant_id: TenantId,
        *,
        status: InvoiceStatus | None,
        customer_id: str | None,
        limit: int,
        after: InvoiceId | None,
    ) -> InvoicePage:
        query = select(invoices).where(invoices.c.tenant_id == tenant_id)
        if status is not None:
            query = query.where(invoices.c.status == status.value)
        if customer_id is not None:
            query = query.where(invoices.c.customer_id == customer_id)
        if after is not None:
            query = query.where(invoices.c.id < after)
        query = query.order_by(invoices.c.id.desc()).limit(limit + 1)
        with database_errors():
            rows = (await self._session.execute(query)).all()[: limit + 1]
            ids = [row.id for row in rows[:limit]]
            line_rows = (
                (
                    await self._session.execute(
                        select(invoice_lines).where(invoice_lines.c.invoice_id.in_(ids))
                    )
                ).all()
                if ids
                else []
            )
        by_invoice: dict[Any, list[Any]] = {}
        for line in line_rows:
            by_invoice.setdefault(line.invoice_id, []).append(line)
        items = [_invoice(row, by_invoice.get(row.id, [])) for row in rows[:limit]]
        next_after = items[-1].id if len(rows) > limit else None
        return InvoicePage(items=items, next_after=next_after)

    async def save(self, invoice: Invoice) -> None:
        with database_errors():
            await self._session.execute(
                update(invoices).where(invoices.c.id == invoice.id).values(_state(invoice))
            )

    async def due_for_auto_pay(
        self, *, after: InvoiceId | None, limit: int
    ) -> Sequence[InvoiceRef]:
        query = select(invoices.c.tenant_id, invoices.c.id).where(
            # The partial index's predicate, as written there.
            invoices.c.status == InvoiceStatus.ISSUED.value,
            invoices.c.auto_pay,
        )
        if after is not None:
            query = query.where(invoices.c.id > after)
        with database_errors():
            rows = (await self._session.execute(query.order_by(invoices.c.id).limit(limit))).all()
        return [InvoiceRef(TenantId(row.tenant_id), InvoiceId(row.id)) for row in rows]

    async def due_for_month_end(
        self, tenant_id: TenantId, month: BillingMonth
    ) -> Sequence[InvoiceId]:
        query = (
            select(invoices.c.id)
            # Invoice.due_for_month_end, as a query.
            .where(
                invoices.c.tenant_id == tenant_id,
                invoices.c.status == InvoiceStatus.DRAFT.value,
                invoices.c.created_at < month.ends_at,
            )
            .order_by(invoices.c.created_at, invoices.c.id)
        )
        with database_errors():
            rows = (await self._session.execute(query)).all()
        return [InvoiceId(row.id) for row in rows]


class SqlaBillingUnitOfWork(SqlaUnitOfWork):
    invoices: SqlaInvoiceRepository
    month_end_runs: SqlaMonthEndRunRepository

    async def __aenter__(self) -> "SqlaBillingUnitOfWork":
        await super().__aenter__()
        self.invoices = SqlaInvoiceRepository(self.session)
        self.month_end_runs = SqlaMonthEndRunRepository(self.session)
        return self
