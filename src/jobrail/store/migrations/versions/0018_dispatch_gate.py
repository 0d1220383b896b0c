"""dispatch_gates: each queue's fast path; dispatch_queues: the figures of its drain

Fair dispatch (``jobrail.dispatch``): ``dispatch_gates.credit`` is how many jobs due now
may still be published at their enqueue (the fast path, as with dispatch off) instead
of being held for the dispatcher's next pass. The dispatcher sets it, while its queue
has no held backlog and no pause, to the room left in the broker; each enqueue takes
from it; at zero (or no row) enqueues hold their jobs. A table of its own: the enqueues
that take from it never wait for a pass, which holds its queue's ``dispatch_queues``
row. ``drain_per_s`` (the jobs the queue's workers took per second, lately) and
``active_weight`` (the sum of the weights of the tenants with held jobs) are written
by the dispatcher about once a second, for the estimate of when a held job starts.

Two nullable columns (no rewrite on Postgres, in place on SQLite) and a table.

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
    op.create_table(
        "dispatch_gates",
        sa.Column("queue", sa.String(128), primary_key=True),
        sa.Column("credit", sa.Integer, nullable=False, server_default=sa.text("0")),
    )
    op.add_column("dispatch_queues", sa.Column("drain_per_s", sa.Float))
    op.add_column("dispatch_queues", sa.Column("active_weight", sa.Float))


def downgrade() -> None:
    # In place on both (SQLite >= 3.35 drops a column without a rebuild).
    op.execute("ALTER TABLE dispatch_queues DROP COLUMN active_weight")
    op.execute("ALTER TABLE dispatch_queues DROP COLUMN drain_per_s")
    op.drop_table("dispatch_gates")
