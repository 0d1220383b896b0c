"""flows: an index on created_at, for the ops page's list of recent batches and chains

The ops page lists every tenant's batches and chains, the newest first, on each of its
refreshes; without this index each refresh would sort the whole table.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-02
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index("ix_flows_created", "flows", ["created_at"])


def downgrade() -> None:
    op.drop_index("ix_flows_created", table_name="flows")
