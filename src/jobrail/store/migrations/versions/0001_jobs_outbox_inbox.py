"""jobs, outbox and inbox

Revision ID: 0001
Revises:
Create Date: 2026-11-30
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

Json = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def UtcDateTime() -> sa.DateTime:  # noqa: N802 - reads like the column types around it
    return sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "jobs",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("tenant_id", sa.String(64), nullable=False),
        sa.Column("type", sa.String(128), nullable=False),
        sa.Column("queue", sa.String(128), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("entity_id", sa.String(255)),
        sa.Column("idempotency_key", sa.String(255)),
        sa.Column("payload", Json, nullable=False),
        sa.Column("result", Json),
        sa.Column("attempts", sa.Integer(), nullable=False, server_default=sa.text("0")),
        sa.Column("max_attempts", sa.Integer(), nullable=False),
        sa.Column("last_error", sa.Text()),
        sa.Column("trace_context", Json, nullable=False),
        sa.Column(
            "cancel_requested", sa.Boolean(), nullable=False, server_default=sa.text("false")
        ),
        sa.Column("created_at", UtcDateTime(), nullable=False),
        sa.Column("updated_at", UtcDateTime(), nullable=False),
        sa.Column("started_at", UtcDateTime()),
        sa.Column("finished_at", UtcDateTime()),
        sa.Column("run_after", UtcDateTime()),
        sa.Column("lease_until", UtcDateTime()),
        sa.CheckConstraint(
            "status IN ('pending', 'running', 'retrying', 'succeeded', 'failed', 'cancelled')",
            name="ck_jobs_status",
        ),
        sa.CheckConstraint("attempts >= 0 AND max_attempts >= 1", name="ck_jobs_attempts"),
        sa.PrimaryKeyConstraint("id", name="pk_jobs"),
    )
    op.create_index(
        "uq_jobs_tenant_idempotency_key", "jobs", ["tenant_id", "idempotency_key"], unique=True
    )
    op.create_index("ix_jobs_tenant_created", "jobs", ["tenant_id", "created_at"])
    op.create_index("ix_jobs_tenant_status_created", "jobs", ["tenant_id", "status", "created_at"])
    op.create_index(
        "ix_jobs_tenant_entity_created", "jobs", ["tenant_id", "entity_id", "created_at"]
    )
    op.create_index("ix_jobs_status_created", "jobs", ["status", "created_at"])

    op.create_table(
        "outbox",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("queue", sa.String(128), nullable=False),
        sa.Column("body", sa.LargeBinary(), nullable=False),
        sa.Column("headers", Json, nullable=False),
        sa.Column("not_before", UtcDateTime()),
        sa.Column("created_at", UtcDateTime(), nullable=False),
        sa.Column("published_at", UtcDateTime()),
        sa.Column("attempts", sa.Integer(), nullable=False, server_default=sa.text("0")),
        sa.Column("last_error", sa.Text()),
        sa.PrimaryKeyConstraint("id", name="pk_outbox"),
    )
    op.create_index(
        "ix_outbox_unpublished_created",
        "outbox",
        ["created_at"],
        postgresql_where=sa.text("published_at IS NULL"),
        sqlite_where=sa.text("published_at IS NULL"),
    )

    op.create_table(
        "inbox",
        sa.Column("consumer", sa.String(128), nullable=False),
        sa.Column("message_id", sa.String(255), nullable=False),
        sa.Column("processed_at", UtcDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("consumer", "message_id", name="pk_inbox"),
    )


def downgrade() -> None:
    op.drop_table("inbox")
    op.drop_index("ix_outbox_unpublished_created", table_name="outbox")
    op.drop_table("outbox")
    op.drop_table("jobs")
