"""billing: invoices and their lines

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "billing_invoices",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("tenant_id", sa.String(64), nullable=False),
        sa.Column("customer_id", sa.String(255), nullable=False),
        sa.Column("customer_email", sa.String(320), nullable=False),
        sa.Column("currency", sa.String(3), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("total_minor", sa.BigInteger(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("issued_at", sa.DateTime(timezone=True)),
        sa.Column("paid_at", sa.DateTime(timezone=True)),
        sa.Column("voided_at", sa.DateTime(timezone=True)),
        sa.CheckConstraint("total_minor >= 0", name="ck_billing_invoices_total_not_negative"),
        sa.PrimaryKeyConstraint("id", name="pk_billing_invoices"),
    )
    op.create_index("ix_billing_invoices_tenant_id", "billing_invoices", ["tenant_id", "id"])
    op.create_index(
        "ix_billing_invoices_tenant_status", "billing_invoices", ["tenant_id", "status", "id"]
    )
    op.create_index(
        "ix_billing_invoices_tenant_customer",
        "billing_invoices",
        ["tenant_id", "customer_id", "id"],
    )
    op.create_table(
        "billing_invoice_lines",
        sa.Column("invoice_id", sa.Uuid(), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("description", sa.Text(), nullable=False),
        sa.Column("quantity", sa.Integer(), nullable=False),
        sa.Column("unit_price_minor", sa.BigInteger(), nullable=False),
        sa.CheckConstraint("quantity >= 1", name="ck_billing_invoice_lines_quantity_positive"),
        sa.CheckConstraint(
            "unit_price_minor >= 0", name="ck_billing_invoice_lines_price_not_negative"
        ),
        sa.ForeignKeyConstraint(
            ["invoice_id"],
            ["billing_invoices.id"],
            name="fk_billing_lines_invoice",
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("invoice_id", "position", name="pk_billing_invoice_lines"),
    )


def downgrade() -> None:
    op.drop_table("billing_invoice_lines")
    op.drop_table("billing_invoices")
