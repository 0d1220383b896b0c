"""billing: month-end runs (one per tenant and month, with the batch that issues them)

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-02
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "billing_month_end_runs",
        sa.Column("tenant_id", sa.String(64), nullable=False),
        sa.Column("month", sa.String(7), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("due", sa.Integer(), nullable=False),
        sa.Column("report_to", sa.String(320), nullable=False),
        sa.Column("batch_id", sa.Uuid()),
        sa.Column("issued", sa.Integer()),
        sa.Column("failed", sa.Integer()),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True)),
        sa.PrimaryKeyConstraint("tenant_id", "month", name="pk_billing_month_end_runs"),
    )


def downgrade() -> None:
    op.drop_table("billing_month_end_runs")
