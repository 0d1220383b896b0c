"""job_attempt_failures: each failed attempt's error and traceback (jobrail.worker.failures)

The jobs table keeps a job's last error alone; the console's job page shows every
attempt's error and traceback from this table. A row goes with its job (ON DELETE
CASCADE), so the retention sweep of jobs needs no change.

Revision ID: 0022
Revises: 0020
Create Date: 2026-12-06
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0022"
down_revision: str | None = "0020"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "job_attempt_failures",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True),
        sa.Column("job_id", sa.Uuid, sa.ForeignKey("jobs.id", ondelete="CASCADE"), nullable=False),
        sa.Column("attempt", sa.Integer, nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("error", sa.Text, nullable=False),
        sa.Column("traceback", sa.Text, nullable=False),
        sqlite_autoincrement=True,
    )
    op.create_index("ix_job_attempt_failures_job_id", "job_attempt_failures", ["job_id", "id"])


def downgrade() -> None:
    op.drop_index("ix_job_attempt_failures_job_id", table_name="job_attempt_failures")
    op.drop_table("job_attempt_failures")
