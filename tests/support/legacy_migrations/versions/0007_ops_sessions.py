"""the ops page's sign-in sessions, kept on the server (see jobrail.ops.console)

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "ops_sessions",
        sa.Column("digest", sa.String(64), nullable=False),
        sa.Column("key_id", sa.Uuid(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["key_id"], ["api_keys.id"], name="fk_ops_sessions_key_id_api_keys"
        ),
        sa.PrimaryKeyConstraint("digest", name="pk_ops_sessions"),
    )
    op.create_index("ix_ops_sessions_key_id", "ops_sessions", ["key_id"])
    op.create_index("ix_ops_sessions_expires_at", "ops_sessions", ["expires_at"])


def downgrade() -> None:
    op.drop_index("ix_ops_sessions_expires_at", table_name="ops_sessions")
    op.drop_index("ix_ops_sessions_key_id", table_name="ops_sessions")
    op.drop_table("ops_sessions")
