"""jobs: progress, the latest a running attempt reported

A nullable JSON column ({"current", "total", "message", "updated_at"}), written by a
running attempt, fenced by its claim (see jobrail.worker.progress); existing jobs have
none.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-02
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

Json = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    # A nullable column without a default: no table rewrite, on Postgres or SQLite.
    op.add_column("jobs", sa.Column("progress", Json, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("progress")
