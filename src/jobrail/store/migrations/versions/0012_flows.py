"""flows: batches and chains; jobs: their flow, part and place, and the blocked status

A new table ``flows`` (one row per batch or chain, with the counts of its members'
ends); three nullable columns on ``jobs`` (``flow_id``, ``flow_role``, ``flow_step``)
with a partial index; and ``blocked`` added to the statuses a job may have (a chain's
later step, a batch's callback, waiting to be released). Existing jobs belong to no
flow.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-02
"""

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql
from sqlalchemy.sql.elements import conv

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

Json = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")

OLD_STATUSES = ("pending", "running", "retrying", "succeeded", "failed", "cancelled")
NEW_STATUSES = (*OLD_STATUSES, "blocked")


def _statuses(statuses: Sequence[str]) -> str:
    return "status IN (" + ", ".join(f"'{s}'" for s in statuses) + ")"


def _status_checks() -> list[str]:
    """The names of the jobs table's CHECK constraints on its status, as the database has
    them: a database made by an older jobrail (its single chain) named them otherwise."""
    checks = sa.inspect(op.get_bind()).get_check_constraints("jobs")
    return [c["name"] for c in checks if c["name"] and "'pending'" in str(c["sqltext"])]


def _replace_status_check(batch: Any, names: list[str], statuses: Sequence[str]) -> None:
    # conv(): the names are the database's own, not to go through the naming convention.
    for name in names:
        batch.drop_constraint(conv(name), type_="check")
    batch.create_check_constraint(
        conv(names[0] if names else "ck_jobs_status"), _statuses(statuses)
    )


def upgrade() -> None:
    op.create_table(
        "flows",
        sa.Column("id", sa.Uuid, nullable=False),
        sa.Column("tenant_id", sa.String(64), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("name", sa.String(255)),
        sa.Column("idempotency_key", sa.String(255)),
        sa.Column("total", sa.Integer, nullable=False),
        sa.Column("succeeded", sa.Integer, nullable=False, server_default=sa.text("0")),
        sa.Column("failed", sa.Integer, nullable=False, server_default=sa.text("0")),
        sa.Column("cancelled", sa.Integer, nullable=False, server_default=sa.text("0")),
        sa.Column("cancel_requested", sa.Boolean, nullable=False, server_default=sa.text("false")),
        sa.Column("callbacks", Json, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True)),
        sa.CheckConstraint("kind IN ('batch', 'chain')", name="ck_flows_kind"),
        sa.CheckConstraint(
            "status IN ('running', 'succeeded', 'failed', 'cancelled')", name="ck_flows_status"
        ),
        sa.CheckConstraint(
            "succeeded >= 0 AND failed >= 0 AND cancelled >= 0 "
            "AND succeeded + failed + cancelled <= total",
            name="ck_flows_counts",
        ),
        sa.PrimaryKeyConstraint("id", name="pk_flows"),
    )
    op.create_index(
        "uq_flows_tenant_idempotency_key", "flows", ["tenant_id", "idempotency_key"], unique=True
    )
    op.create_index("ix_flows_tenant_created", "flows", ["tenant_id", "created_at"])
    op.create_index("ix_flows_finished", "flows", ["finished_at"])
    names = _status_checks()
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("flow_id", sa.Uuid))
        batch.add_column(sa.Column("flow_role", sa.String(16)))
        batch.add_column(sa.Column("flow_step", sa.Integer))
        _replace_status_check(batch, names, NEW_STATUSES)
    op.create_index(
        "ix_jobs_flow",
        "jobs",
        ["flow_id", "flow_step"],
        postgresql_where=sa.text("flow_id IS NOT NULL"),
        sqlite_where=sa.text("flow_id IS NOT NULL"),
    )


def downgrade() -> None:
    op.drop_index("ix_jobs_flow", table_name="jobs")
    op.execute("DELETE FROM jobs WHERE status = 'blocked'")
    names = _status_checks()
    with op.batch_alter_table("jobs") as batch:
        _replace_status_check(batch, names, OLD_STATUSES)
        batch.drop_column("flow_step")
        batch.drop_column("flow_role")
        batch.drop_column("flow_id")
    op.drop_table("flows")
