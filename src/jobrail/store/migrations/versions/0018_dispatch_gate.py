"""dispatch_queues: the fast-path gate and the figures a waiting job's estimate reads

Fair dispatch (``jobrail.dispatch``): ``open`` is the queue's gate. While its dispatcher
finds no held backlog, no pause and room in the broker, it opens the gate, and an
enqueue of a job due now publishes it at once (the fast path, as with dispatch off)
instead of holding it for the next pass. ``drain_per_s`` (the jobs the queue's workers
took per second, lately) and ``active_weight`` (the sum of the weights of the tenants
with held jobs) are written by the dispatcher about once a second, for the estimate of
when a held job starts (``GET /jobs/{id}``).

Three columns with constant defaults or none: no rewrite on Postgres, in place on SQLite.

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-06
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0018"
down_revision: str | None = "0017"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "dispatch_queues",
        sa.Column("open", sa.Boolean, nullable=False, server_default=sa.false()),
    )
    op.add_column("dispatch_queues", sa.Column("drain_per_s", sa.Float))
    op.add_column("dispatch_queues", sa.Column("active_weight", sa.Float))


def downgrade() -> None:
    # In place on both (SQLite >= 3.35 drops a column without a rebuild).
    op.execute("ALTER TABLE dispatch_queues DROP COLUMN active_weight")
    op.execute("ALTER TABLE dispatch_queues DROP COLUMN drain_per_s")
    op.execute("ALTER TABLE dispatch_queues DROP COLUMN open")
