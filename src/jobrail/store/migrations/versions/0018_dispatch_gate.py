"""dispatch_gates: each queue's fast path; dispatch_queues: the figures of its drain;
jobs.fair_key: a second level of fair dispatch inside a tenant's share

Fair dispatch (``jobrail.dispatch``): ``dispatch_gates.credit`` is how many jobs due now
may still be published at their enqueue (the fast path, as with dispatch off) instead
of being held for the dispatcher's next pass. The dispatcher sets it, while its queue
has no held backlog and no pause, to the room left in the broker; each enqueue takes
from it; at zero (or no row) enqueues hold their jobs, and the first that does marks it
``spent``, which keeps the dispatcher from topping it up until it has seen those jobs.
A table of its own: the enqueues that take from it never wait for a pass, which holds
its queue's ``dispatch_queues`` row. ``drain_per_s`` (the jobs the queue's workers took
per second, lately) and ``active_weight`` (the sum of the weights of the tenants with
held jobs) are written by the dispatcher about once a second, for the estimate of when
a held job starts.

``jobs.fair_key`` ('' for every existing job: one line per tenant) is the job's line
inside its tenant's share, from its type's key template; the held jobs' index orders
each line (``ix_jobs_held_lines`` replaces ``ix_jobs_held``), and an arrival note names
the line (``dispatch_arrivals`` is made again with it in its key: its notes are hints,
and the dispatchers find every held job again within ``rediscover_s`` anyway).

``ix_jobs_held_due`` finds the held jobs due later that have just come due (a job held
with ``run_at`` or ``delay``). Columns nullable or with a constant default (no rewrite on
Postgres, in place on SQLite), indexes built ``CONCURRENTLY`` on Postgres, two small
tables.

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-06
"""

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op

revision: str = "0018"
down_revision: str | None = "0017"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

HELD = "held_since IS NOT NULL AND status IN ('pending', 'retrying')"


def upgrade() -> None:
    op.create_table(
        "dispatch_gates",
        sa.Column("queue", sa.String(128), primary_key=True),
        sa.Column("credit", sa.Integer, nullable=False, server_default=sa.text("0")),
        sa.Column("spent", sa.Boolean, nullable=False, server_default=sa.false()),
    )
    op.add_column("dispatch_queues", sa.Column("drain_per_s", sa.Float))
    op.add_column("dispatch_queues", sa.Column("active_weight", sa.Float))
    op.drop_table("dispatch_arrivals")
    _arrivals("queue", "tenant_id", "fair_key")
    op.add_column(
        "jobs",
        sa.Column("fair_key", sa.String(255), nullable=False, server_default=sa.text("''")),
    )
    _swap_index("ix_jobs_held", "ix_jobs_held_lines", ["queue", "tenant_id", "fair_key"])
    _due_index()


def _due_index() -> None:
    """The held jobs due later, by queue and when: the dispatcher looks for those just due."""
    where = sa.text(HELD + " AND run_after IS NOT NULL")
    options: dict[str, Any] = {"postgresql_where": where, "sqlite_where": where}
    if op.get_bind().dialect.name != "postgresql":
        op.create_index("ix_jobs_held_due", "jobs", ["queue", "run_after"], **options)
        return
    with op.get_context().autocommit_block():
        op.create_index(
            "ix_jobs_held_due",
            "jobs",
            ["queue", "run_after"],
            postgresql_concurrently=True,
            if_not_exists=True,
            **options,
        )


def _arrivals(*key: str) -> None:
    lengths = {"queue": 128, "tenant_id": 64, "fair_key": 255}
    op.create_table(
        "dispatch_arrivals",
        *(sa.Column(name, sa.String(lengths[name]), primary_key=True) for name in key),
    )


def _swap_index(old: str, new: str, line: list[str]) -> None:
    """Build `new` over the held jobs, by `line` then rank, and drop `old`. Either step
    may have been done already: on Postgres they commit on their own, so a migration
    that failed after them (0017's refused downgrade) leaves them behind."""
    options: dict[str, Any] = {
        "postgresql_where": sa.text(HELD),
        "sqlite_where": sa.text(HELD),
        "if_not_exists": True,
    }
    if op.get_bind().dialect.name != "postgresql":
        op.create_index(new, "jobs", [*line, "rank_at", "id"], **options)
        op.drop_index(old, table_name="jobs", if_exists=True)
        return
    with op.get_context().autocommit_block():
        options["postgresql_concurrently"] = True
        op.create_index(new, "jobs", [*line, "rank_at", "id"], **options)
        op.drop_index(old, table_name="jobs", postgresql_concurrently=True, if_exists=True)


def downgrade() -> None:
    op.drop_index("ix_jobs_held_due", table_name="jobs", if_exists=True)
    _swap_index("ix_jobs_held_lines", "ix_jobs_held", ["queue", "tenant_id"])
    # In place on both (SQLite >= 3.35 drops a column without a rebuild).
    op.execute("ALTER TABLE jobs DROP COLUMN fair_key")
    op.drop_table("dispatch_arrivals")
    _arrivals("queue", "tenant_id")
    op.execute("ALTER TABLE dispatch_queues DROP COLUMN active_weight")
    op.execute("ALTER TABLE dispatch_queues DROP COLUMN drain_per_s")
    op.drop_table("dispatch_gates")
