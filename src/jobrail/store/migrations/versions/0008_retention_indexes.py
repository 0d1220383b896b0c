"""retention: indexes for pruning published outbox rows and old inbox rows

prune-messages deletes in batches; without these each batch would scan the table from
its start, over the rows the batches before it deleted (see jobrail.maintenance).

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

PUBLISHED = "published_at IS NOT NULL"


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        _create_indexes()
        return
    # Both tables take a row per enqueue and per event and were never pruned before:
    # a plain CREATE INDEX would lock out every enqueue while it reads them all.
    # CONCURRENTLY does not, and must run outside a transaction.
    with op.get_context().autocommit_block():
        _create_indexes(postgresql_concurrently=True)


def _create_indexes(**options: bool) -> None:
    op.create_index(
        "ix_outbox_published",
        "outbox",
        ["published_at"],
        postgresql_where=sa.text(PUBLISHED),
        sqlite_where=sa.text(PUBLISHED),
        **options,
    )
    op.create_index("ix_inbox_processed", "inbox", ["processed_at"], **options)


def downgrade() -> None:
    op.drop_index("ix_inbox_processed", table_name="inbox")
    op.drop_index("ix_outbox_published", table_name="outbox")
