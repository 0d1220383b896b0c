"""sync: accounts and their items

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-30
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "sync_accounts",
        sa.Column("tenant_id", sa.String(64), nullable=False),
        sa.Column("account_id", sa.String(255), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("cursor", sa.String(255)),
        sa.Column("items_synced", sa.Integer(), nullable=False),
        sa.Column("last_synced_at", sa.DateTime(timezone=True)),
        sa.Column("last_error", sa.String(1000)),
        sa.Column("fence", sa.BigInteger(), nullable=False),
        sa.Column("syncs_started", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("tenant_id", "account_id", name="pk_sync_accounts"),
    )
    op.create_table(
        "sync_items",
        sa.Column("tenant_id", sa.String(64), nullable=False),
        sa.Column("account_id", sa.String(255), nullable=False),
        sa.Column("item_id", sa.String(255), nullable=False),
        sa.Column("data", sa.JSON().with_variant(postgresql.JSONB(), "postgresql"), nullable=False),
        sa.Column("synced_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("tenant_id", "account_id", "item_id", name="pk_sync_items"),
    )


def downgrade() -> None:
    op.drop_table("sync_items")
    op.drop_table("sync_accounts")
