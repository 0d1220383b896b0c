"""billing: invoices opt in to auto-pay (the scheduler pays them once issued)

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-30
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

DUE = "status = 'issued' AND auto_pay"


def upgrade() -> None:
    with op.batch_alter_table("billing_invoices") as batch:
        batch.add_column(
            sa.Column("auto_pay", sa.Boolean(), server_default=sa.text("false"), nullable=False)
        )
    op.create_index(
        "ix_billing_invoices_auto_pay_due",
        "billing_invoices",
        ["id"],
        postgresql_where=sa.text(DUE),
        sqlite_where=sa.text(DUE),
    )


def downgrade() -> None:
    op.drop_index("ix_billing_invoices_auto_pay_due", table_name="billing_invoices")
    with op.batch_alter_table("billing_invoices") as batch:
        batch.drop_column("auto_pay")
