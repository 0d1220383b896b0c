"""HTTP routes of billing. Thin: parse, build the command, call the use case."""

import uuid
from datetime import datetime
from typing import Annotated, Literal

from dishka.integrations.fastapi import DishkaRoute, FromDishka
from fastapi import APIRouter, Query
from pydantic import BaseModel, EmailStr, Field, model_validator

from contexts.billing.application.commands import (
    CreateInvoiceCommand,
    InvoiceCommand,
    LineInput,
    ListInvoicesQuery,
)
from contexts.billing.application.use_cases import (
    CreateInvoice,
    GetInvoice,
    IssueInvoice,
    ListInvoices,
    PayInvoice,
    VoidInvoice,
)
from contexts.billing.domain.invoice import Invoice, InvoiceId, InvoiceStatus
from jobrail.web import (
    ERROR_RESPONSES,
    CurrentTenant,
    RateLimitEnqueue,
    RateLimitRead,
    RequestModel,
)

router = APIRouter(
    prefix="/billing/invoices", tags=["billing"], route_class=DishkaRoute, responses=ERROR_RESPONSES
)


MAX_TOTAL_MINOR = 2**63 - 1


class LineIn(RequestModel):
    description: str = Field(min_length=1, max_length=500)
    quantity: int = Field(ge=1, le=1_000_000)
    unit_price_minor: int = Field(ge=0, le=10**12)


class InvoiceIn(RequestModel):
    customer_id: str = Field(min_length=1, max_length=255)
    customer_email: EmailStr
    currency: str = Field(pattern=r"^[A-Z]{3}$", examples=["EUR"])
    lines: list[LineIn] = Field(default_factory=list, max_length=500)
    auto_pay: bool = Field(
        default=False, description="Pay it automatically once issued (billing's auto-pay)."
    )

    @model_validator(mode="after")
    def _total_fits(self) -> "InvoiceIn":
        # Each line fits, but together they can pass what the total's column (BIGINT) holds.
        total = sum(line.quantity * line.unit_price_minor for line in self.lines)
        if total > MAX_TOTAL_MINOR:
            raise ValueError(f"the invoice total must be at most {MAX_TOTAL_MINOR} minor units")
        return self


class LineOut(BaseModel):
    description: str
    quantity: int
    unit_price_minor: int
    total_minor: int


class InvoiceOut(BaseModel):
    id: uuid.UUID
    status: Literal["draft", "issued", "paid", "void"]
    customer_id: str
    customer_email: str
    currency: str
    total_minor: int
    lines: list[LineOut]
    created_at: datetime
    issued_at: datetime | None
    paid_at: datetime | None
    voided_at: datetime | None
    auto_pay: bool

    @classmethod
    def of(cls, invoice: Invoice) -> "InvoiceOut":
        return cls(
            id=invoice.id,
            status=invoice.status.value,
            customer_id=invoice.customer_id,
            customer_email=invoice.customer_email,
            currency=invoice.currency,
            total_minor=invoice.total.amount_minor,
            lines=[
                LineOut(
                    description=line.description,
                    quantity=line.quantity,
                    unit_price_minor=line.unit_price.amount_minor,
                    total_minor=line.total.amount_minor,
                )
                for line in invoice.lines
            ],
            created_at=invoice.created_at,
            issued_at=invoice.issued_at,
            paid_at=invoice.paid_at,
            voided_at=invoice.voided_at,
            auto_pay=invoice.auto_pay,
        )


class InvoiceList(BaseModel):
    items: list[InvoiceOut]
    next_cursor: uuid.UUID | None


@router.post(
    "",
    status_code=201,
    summary="Create a draft invoice",
    description=CreateInvoice.__doc__,
    dependencies=[RateLimitEnqueue],
)
async def create_invoice(
    body: InvoiceIn, tenant: CurrentTenant, create: FromDishka[CreateInvoice]
) -> InvoiceOut:
    invoice = await create(
        CreateInvoiceCommand(
            tenant_id=tenant,
            customer_id=body.customer_id,
            customer_email=str(body.customer_email),
            currency=body.currency,
            lines=tuple(
                LineInput(line.description, line.quantity, line.unit_price_minor)
                for line in body.lines
            ),
            auto_pay=body.auto_pay,
        )
    )
    return InvoiceOut.of(invoice)


@router.post(
    "/{invoice_id}/issue",
    summary="Issue a draft invoice",
    description=IssueInvoice.__doc__,
    dependencies=[RateLimitEnqueue],
)
async def issue_invoice(
    invoice_id: uuid.UUID, tenant: CurrentTenant, issue: FromDishka[IssueInvoice]
) -> InvoiceOut:
    return InvoiceOut.of(await issue(InvoiceCommand(tenant, InvoiceId(invoice_id))))


@router.post(
    "/{invoice_id}/pay",
    summary="Pay an issued invoice",
    description=PayInvoice.__doc__,
    dependencies=[RateLimitEnqueue],
)
async def pay_invoice(
    invoice_id: uuid.UUID, tenant: CurrentTenant, pay: FromDishka[PayInvoice]
) -> InvoiceOut:
    return InvoiceOut.of(await pay(InvoiceCommand(tenant, InvoiceId(invoice_id))))


@router.post(
    "/{invoice_id}/void",
    summary="Void an invoice",
    description=VoidInvoice.__doc__,
    dependencies=[RateLimitEnqueue],
)
async def void_invoice(
    invoice_id: uuid.UUID, tenant: CurrentTenant, void: FromDishka[VoidInvoice]
) -> InvoiceOut:
    return InvoiceOut.of(await void(InvoiceCommand(tenant, InvoiceId(invoice_id))))


@router.get("/{invoice_id}", summary="An invoice", dependencies=[RateLimitRead])
async def get_invoice(
    invoice_id: uuid.UUID, tenant: CurrentTenant, get: FromDishka[GetInvoice]
) -> InvoiceOut:
    return InvoiceOut.of(await get(InvoiceCommand(tenant, InvoiceId(invoice_id))))


@router.get(
    "",
    summary="Invoices, newest first",
    description=ListInvoices.__doc__,
    dependencies=[RateLimitRead],
)
async def list_invoices(
    tenant: CurrentTenant,
    list_invoices: FromDishka[ListInvoices],
    status: Literal["draft", "issued", "paid", "void"] | None = None,
    customer_id: Annotated[str | None, Query(max_length=255)] = None,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
    cursor: uuid.UUID | None = None,
) -> InvoiceList:
    page = await list_invoices(
        ListInvoicesQuery(
            tenant_id=tenant,
            status=InvoiceStatus(status) if status else None,
            customer_id=customer_id,
            limit=limit,
            after=InvoiceId(cursor) if cursor else None,
        )
    )
    return InvoiceList(items=[InvoiceOut.of(i) for i in page.items], next_cursor=page.next_after)
