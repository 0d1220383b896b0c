"""ops_samples, and jobs' indexes for the console's overview

The overview's charts read one row per metric and minute (jobs finished by type and
status, the time to start, the queue depths), written each minute by housekeeping and
kept a day. Its live counts read the jobs not ended yet through a partial index, and
the samples are taken from the jobs finished and started in a minute through indexes
on those times: no query of the overview reads the whole jobs table.

Revision ID: 0023
Revises: 0022
Create Date: 2026-12-06
"""

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op

revision: str = "0023"
down_revision: str | None = "0022"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

LIVE = "status IN ('pending', 'running', 'retrying', 'blocked')"
INDEXES: list[tuple[str, list[str], str, list[str]]] = [
    ("ix_jobs_live", ["status", "queue", "type"], LIVE, []),
    ("ix_jobs_finished", ["finished_at", "type", "status"], "finished_at IS NOT NULL", []),
    ("ix_jobs_started", ["started_at"], "started_at IS NOT NULL", ["created_at", "run_after"]),
    ("ix_jobs_failed_finished", ["finished_at"], "status = 'failed'", []),
]


def upgrade() -> None:
    op.create_table(
        "ops_samples",
        sa.Column("metric", sa.String(32), nullable=False),
        sa.Column("minute", sa.DateTime(timezone=True), nullable=False),
        sa.Column("label", sa.String(255), nullable=False),
        sa.Column("value", sa.Float, nullable=False),
        sa.PrimaryKeyConstraint("metric", "minute", "label", name="pk_ops_samples"),
    )
    op.create_index("ix_ops_samples_minute", "ops_samples", ["minute"])
    if op.get_bind().dialect.name != "postgresql":
        _create_indexes()
        return
    # As 0020: jobs is the largest table, so its indexes are built without locking out
    # enqueues and records (CONCURRENTLY, outside a transaction).
    with op.get_context().autocommit_block():
        _create_indexes(postgresql_concurrently=True)


def _create_indexes(**options: Any) -> None:
    for name, columns, where, include in INDEXES:
        extra: dict[str, Any] = {"postgresql_include": include} if include else {}
        op.create_index(
            name,
            "jobs",
            columns,
            postgresql_where=sa.text(where),
            sqlite_where=sa.text(where),
            **extra,
            **options,
        )


def downgrade() -> None:
    for name, _columns, _where, _include in reversed(INDEXES):
        op.drop_index(name, table_name="jobs")
    op.drop_index("ix_ops_samples_minute", table_name="ops_samples")
    op.drop_table("ops_samples")
