"""jobs: indexes for the console's job list

The console lists every tenant's jobs newest first, filtered by type or queue, and finds
jobs by an idempotency or unique key whatever their tenant. No index of ``jobs`` starts
with its creation time, its type, its queue or a key alone: without these a page of the
list would read every job. The key indexes hold the keyed jobs alone.

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-06
"""

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op

revision: str = "0020"
down_revision: str | None = "0019"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

INDEXES: list[tuple[str, list[str], str | None]] = [
    ("ix_jobs_created_id", ["created_at", "id"], None),
    ("ix_jobs_type_created", ["type", "created_at"], None),
    ("ix_jobs_queue_created", ["queue", "created_at"], None),
    ("ix_jobs_idempotency_key", ["idempotency_key"], "idempotency_key IS NOT NULL"),
    ("ix_jobs_unique_key", ["unique_key"], "unique_key IS NOT NULL"),
]


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        _create_indexes()
        return
    # jobs is the largest table: a plain CREATE INDEX would lock out every enqueue and
    # every job's record while it reads it all. CONCURRENTLY does not, outside a
    # transaction. (On SQLite an index is added in place.)
    with op.get_context().autocommit_block():
        _create_indexes(postgresql_concurrently=True)


def _create_indexes(**options: Any) -> None:
    for name, columns, where in INDEXES:
        partial = (
            {}
            if where is None
            else {"postgresql_where": sa.text(where), "sqlite_where": sa.text(where)}
        )
        op.create_index(name, "jobs", columns, **partial, **options)


def downgrade() -> None:
    for name, _columns, _where in reversed(INDEXES):
        op.drop_index(name, table_name="jobs")
