"""jobs: held for a dispatcher; the dispatcher's lease per queue and its arrival notes

Fair dispatch (``jobrail.dispatch``, off unless ``JOBRAIL_DISPATCH__ENABLED``): a job
an enqueue holds waits in the database until a dispatcher releases it into the broker.
Two nullable columns on ``jobs``: ``held_since`` (NULL for every existing job: they are
all released) and ``rank_at`` (its place in its tenant's line), ``priority`` (1, normal,
for every existing job), and a partial index over
the held jobs alone, in the order they are released. ``dispatch_queues``: one row per
queue, the lease of the one dispatcher that releases its jobs. ``dispatch_arrivals``:
the tenants whose held jobs arrived since the dispatcher last looked.
``dispatch_pauses``: the queues, job types and tenants an operator paused. ``tenants.weight``:
a tenant's share of a queue's workers under fair dispatch (NULL, as for every existing
tenant: 1).

On Postgres the columns are nullable with no default (no rewrite of ``jobs``) and the
index is built ``CONCURRENTLY``. On SQLite the columns are added in place: ``jobs`` is
not rebuilt, so its triggers stay.

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-06
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0017"
down_revision: str | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

HELD = "held_since IS NOT NULL AND status IN ('pending', 'retrying')"


def upgrade() -> None:
    op.create_table(
        "dispatch_queues",
        sa.Column("queue", sa.String(128), primary_key=True),
        sa.Column("holder", sa.String(128)),
        sa.Column("term", sa.Integer, nullable=False, server_default=sa.text("0")),
        sa.Column("lease_until", sa.DateTime(timezone=True)),
    )
    op.create_table(
        "dispatch_arrivals",
        sa.Column("queue", sa.String(128), primary_key=True),
        sa.Column("tenant_id", sa.String(64), primary_key=True),
    )
    op.create_table(
        "dispatch_pauses",
        sa.Column("scope", sa.String(16), primary_key=True),
        sa.Column("value", sa.String(128), primary_key=True),
        sa.Column("paused_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint(
            "scope IN ('queue', 'type', 'tenant')", name=op.f("ck_dispatch_pauses_scope")
        ),
    )
    op.add_column("tenants", sa.Column("weight", sa.Float))
    # In place on both: nullable, no default (SQLite's ADD COLUMN keeps the triggers).
    op.add_column("jobs", sa.Column("held_since", sa.DateTime(timezone=True)))
    op.add_column("jobs", sa.Column("rank_at", sa.DateTime(timezone=True)))
    # A constant default: Postgres adds it without rewriting the table.
    op.add_column(
        "jobs",
        sa.Column("priority", sa.SmallInteger, nullable=False, server_default=sa.text("1")),
    )
    postgres = op.get_bind().dialect.name == "postgresql"
    if not postgres:
        _held_index()
        return
    with op.get_context().autocommit_block():
        _held_index(postgresql_concurrently=True)


def _held_index(**options: bool) -> None:
    op.create_index(
        "ix_jobs_held",
        "jobs",
        ["queue", "tenant_id", "rank_at", "id"],
        postgresql_where=sa.text(HELD),
        sqlite_where=sa.text(HELD),
        **options,
    )


def downgrade() -> None:
    # A held job has no message: without its columns nothing would ever release it.
    jobs = sa.table("jobs", sa.column("held_since"), sa.column("status"))
    held_jobs = sa.select(sa.func.count()).select_from(jobs).where(sa.text(HELD))
    held = op.get_bind().execute(held_jobs).scalar_one()
    if held:
        raise RuntimeError(
            f"{held} jobs wait for the dispatcher: run the workers with "
            "JOBRAIL_DISPATCH__ENABLED=false until they have been released, then downgrade"
        )
    op.drop_index("ix_jobs_held", table_name="jobs")
    # In place on both (SQLite >= 3.35 drops a column without a rebuild).
    op.execute("ALTER TABLE jobs DROP COLUMN priority")
    op.execute("ALTER TABLE jobs DROP COLUMN rank_at")
    op.execute("ALTER TABLE jobs DROP COLUMN held_since")
    # In place: a batch would rebuild tenants, which api_keys' foreign key refuses.
    op.execute("ALTER TABLE tenants DROP COLUMN weight")
    op.drop_table("dispatch_pauses")
    op.drop_table("dispatch_arrivals")
    op.drop_table("dispatch_queues")
