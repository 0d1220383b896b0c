"""jobs: a partial index on the webhook delivery jobs, for the ops page's webhooks

The ops page counts every tenant's webhook deliveries of the last 24 hours, and lists
the failed ones, on each of its refreshes. No index of ``jobs`` starts with its type:
without this one each refresh would read every job of the day. It holds the delivery
jobs alone, so no other job pays for it.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-03
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

DELIVERIES = "type = 'webhooks.deliver'"


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        _create_index()
        return
    # jobs is the largest table: a plain CREATE INDEX would lock out every enqueue and
    # every job's record while it reads it all. CONCURRENTLY does not, outside a
    # transaction. (On SQLite an index is added in place: the triggers of 0013 stay.)
    with op.get_context().autocommit_block():
        _create_index(postgresql_concurrently=True)


def _create_index(**options: bool) -> None:
    op.create_index(
        "ix_jobs_webhook_deliveries",
        "jobs",
        ["created_at", "tenant_id", "status"],
        postgresql_where=sa.text(DELIVERIES),
        sqlite_where=sa.text(DELIVERIES),
        **options,
    )


def downgrade() -> None:
    op.drop_index("ix_jobs_webhook_deliveries", table_name="jobs")
