"""jobs: what a job the limits defer waits for (``waiting``: its limits or lock and their
keys, when it tries again, since when it waits), NULL once it starts

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-01
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

Json = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("waiting", Json))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("waiting")
