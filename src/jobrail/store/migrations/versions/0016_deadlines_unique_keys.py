"""jobs: a deadline to start by, the expired status, a key unique while active, a key
that debounces; tenants: a cap on their jobs waiting to start

Two nullable columns on ``jobs``: ``deadline`` (a job not started by then ends
``expired`` and never runs) and ``unique_key`` (while a job of a tenant and type with
that key is pending, retrying or running, another enqueue with it returns that job).
``expired`` joins the statuses a job may have. Two partial indexes: the unique one,
over the active jobs alone (a job that has ended frees its key), and one over the
deadlines of the jobs that wait, for the sweep that expires them. Existing jobs have
neither. ``debounce_key``: while a job of a tenant and type with that key is pending,
another enqueue with it replaces its payload (a partial unique index over the pending
jobs). ``tenants.max_queued``: at most this many of the tenant's jobs wait to start
(NULL, as for every existing tenant: no cap).

On Postgres the status CHECK is added ``NOT VALID`` and validated after, so the table
is not locked while every row is checked, and the indexes are built ``CONCURRENTLY``.
On SQLite the CHECK change rebuilds ``jobs``: the triggers of 0013 and the partial
indexes are made again after it.

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-06
"""

import importlib.util
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.sql.elements import conv

revision: str = "0016"
down_revision: str | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

OLD_STATUSES = ("pending", "running", "retrying", "succeeded", "failed", "cancelled", "blocked")
NEW_STATUSES = (*OLD_STATUSES, "expired")

ACTIVE_UNIQUE = "unique_key IS NOT NULL AND status IN ('pending', 'retrying', 'running')"
WAITING_DEADLINE = "deadline IS NOT NULL AND status IN ('pending', 'retrying')"
PENDING_DEBOUNCE = "debounce_key IS NOT NULL AND status = 'pending'"
# The partial indexes a SQLite rebuild would not keep as they are.
FLOW = "flow_id IS NOT NULL"
DELIVERIES = "type = 'webhooks.deliver'"


def _statuses(statuses: Sequence[str]) -> str:
    return "status IN (" + ", ".join(f"'{s}'" for s in statuses) + ")"


def _status_check() -> str:
    checks = sa.inspect(op.get_bind()).get_check_constraints("jobs")
    names = [c["name"] for c in checks if c["name"] and "'pending'" in str(c["sqltext"])]
    return names[0] if names else "ck_jobs_status"


def _partial(name: str, columns: list[str], where: str, **options: Any) -> None:
    op.create_index(
        name,
        "jobs",
        columns,
        postgresql_where=sa.text(where),
        sqlite_where=sa.text(where),
        **options,
    )


def _new_indexes(**options: Any) -> None:
    _partial(
        "uq_jobs_active_unique_key",
        ["tenant_id", "type", "unique_key"],
        ACTIVE_UNIQUE,
        unique=True,
        **options,
    )
    _partial("ix_jobs_waiting_deadline", ["deadline"], WAITING_DEADLINE, **options)
    _partial(
        "uq_jobs_pending_debounce_key",
        ["tenant_id", "type", "debounce_key"],
        PENDING_DEBOUNCE,
        unique=True,
        **options,
    )


def _create_triggers() -> None:
    # 0013's own function: a revision file is not a module a package import can name.
    path = Path(__file__).with_name("0013_job_events.py")
    spec = importlib.util.spec_from_file_location("jobrail_migration_0013", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.create_triggers()


def _rebuild_sqlite(statuses: Sequence[str], columns: Any) -> None:
    """Change the CHECK (and the columns) of jobs on SQLite, which rebuilds the table:
    its triggers and partial indexes are made again after."""
    op.drop_index("ix_jobs_flow", table_name="jobs")
    op.drop_index("ix_jobs_webhook_deliveries", table_name="jobs")
    name = _status_check()
    with op.batch_alter_table("jobs") as batch:
        batch.drop_constraint(conv(name), type_="check")
        batch.create_check_constraint(conv(name), _statuses(statuses))
        columns(batch)
    _partial("ix_jobs_flow", ["flow_id", "flow_step"], FLOW)
    _partial("ix_jobs_webhook_deliveries", ["created_at", "tenant_id", "status"], DELIVERIES)
    _create_triggers()


def _add_columns(batch: Any) -> None:
    batch.add_column(sa.Column("deadline", sa.DateTime(timezone=True)))
    batch.add_column(sa.Column("unique_key", sa.String(255)))
    batch.add_column(sa.Column("debounce_key", sa.String(255)))


def _drop_columns(batch: Any) -> None:
    batch.drop_column("debounce_key")
    batch.drop_column("unique_key")
    batch.drop_column("deadline")


def upgrade() -> None:
    op.add_column("tenants", sa.Column("max_queued", sa.Integer))
    if op.get_bind().dialect.name != "postgresql":
        _rebuild_sqlite(NEW_STATUSES, _add_columns)
        _new_indexes()
        return
    name = op.get_bind().dialect.identifier_preparer.quote(_status_check())
    with op.batch_alter_table("jobs") as batch:  # in place on Postgres
        _add_columns(batch)  # nullable, no default: no rewrite of the table
    op.execute(
        f"ALTER TABLE jobs DROP CONSTRAINT {name}, "
        f"ADD CONSTRAINT {name} CHECK ({_statuses(NEW_STATUSES)}) NOT VALID"
    )
    with op.get_context().autocommit_block():
        # After the commit of the above: the scan holds no lock that stops writes.
        op.execute(f"ALTER TABLE jobs VALIDATE CONSTRAINT {name}")
        _new_indexes(postgresql_concurrently=True)


def downgrade() -> None:
    op.drop_index("uq_jobs_pending_debounce_key", table_name="jobs")
    op.drop_index("ix_jobs_waiting_deadline", table_name="jobs")
    op.drop_index("uq_jobs_active_unique_key", table_name="jobs")
    op.execute("DELETE FROM jobs WHERE status = 'expired'")
    # In place: a batch would rebuild tenants, which api_keys' foreign key refuses.
    op.execute("ALTER TABLE tenants DROP COLUMN max_queued")
    if op.get_bind().dialect.name != "postgresql":
        _rebuild_sqlite(OLD_STATUSES, _drop_columns)
        return
    name = op.get_bind().dialect.identifier_preparer.quote(_status_check())
    op.execute(
        f"ALTER TABLE jobs DROP CONSTRAINT {name}, "
        f"ADD CONSTRAINT {name} CHECK ({_statuses(OLD_STATUSES)})"
    )
    with op.batch_alter_table("jobs") as batch:
        _drop_columns(batch)
