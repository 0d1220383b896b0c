"""job_events: the job event feed, written by triggers on jobs; webhooks and their relay

A new table ``job_events`` with one row per change of a job a client may follow
(enqueued, started, progress, deferred, retrying, succeeded, failed, cancelled,
released, redriven), written by two triggers on ``jobs`` so that every path
that changes a job records its event in its own transaction (see
jobrail.store.tables.job_events). New tables ``webhooks`` and ``webhook_relay``
(jobrail.webhooks). Existing jobs have no past events.

A later migration that rebuilds ``jobs`` on SQLite (``batch_alter_table`` with a
"move and copy") drops these triggers with the old table: it must create them again
(``create_triggers``); tests/integration/test_job_events.py checks the head has them.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-02
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

Json = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")

# Which event a change of a job is, from its row before (OLD) and after (NEW). A JSON
# column set to None holds JSON null rather than SQL NULL, hence the `present` checks.
_NAME = """CASE
    WHEN NEW.status = 'running' AND (OLD.status <> 'running' OR NEW.attempts <> OLD.attempts)
      THEN 'started'
    WHEN NEW.status <> OLD.status THEN CASE
      WHEN NEW.status <> 'pending' THEN NEW.status
      WHEN OLD.status = 'blocked' THEN 'released'
      ELSE 'redriven' END
    WHEN {progress_present} AND {progress_changed} THEN 'progress'
    WHEN {waiting_present} AND {waiting_changed} THEN 'deferred'
  END"""

# An update that changes none of these records nothing (lease renewals, results).
_WATCHED = ("status", "attempts", "progress", "waiting")

_PG_FUNCTION = """
CREATE FUNCTION {schema}.jobrail_job_event() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  event text;
  tx bigint := pg_current_xact_id()::text::bigint;
  before bigint;
BEGIN
  IF TG_OP = 'INSERT' THEN
    event := 'enqueued';
  ELSE
    event := {name};
  END IF;
  IF event IS NULL THEN
    RETURN NULL;
  END IF;
  IF TG_OP = 'UPDATE' THEN
    -- A transaction that took its id before the one whose change it waited for (it holds
    -- the job's row now, so that one has committed) orders after it, not before: the
    -- events of one job are in the order of its changes.
    SELECT e.tx INTO before FROM {schema}.job_events AS e
     WHERE e.job_id = NEW.id ORDER BY e.id DESC LIMIT 1;
    IF before > tx THEN
      tx := before;
    END IF;
  END IF;
  INSERT INTO {schema}.job_events (tx, tenant_id, job_id, job_type, name, at, data)
  VALUES (
    tx, NEW.tenant_id, NEW.id, NEW.type, event,
    statement_timestamp(),
    jsonb_build_object(
      'status', NEW.status, 'attempts', NEW.attempts, 'last_error', NEW.last_error,
      'run_after', NEW.run_after, 'progress', NEW.progress, 'waiting', NEW.waiting,
      'flow_id', NEW.flow_id
    )
  );
  RETURN NULL;
END
$$
"""

_SQLITE_NOW = "strftime('%Y-%m-%d %H:%M:%f', 'now') || '000'"
_SQLITE_DATA = (
    "json_object('status', NEW.status, 'attempts', NEW.attempts, "
    "'last_error', NEW.last_error, 'run_after', NEW.run_after, "
    "'progress', json(NEW.progress), 'waiting', json(NEW.waiting), 'flow_id', NEW.flow_id)"
)


def _pg_name() -> str:
    return _NAME.format(
        progress_present="NEW.progress IS NOT NULL AND jsonb_typeof(NEW.progress) <> 'null'",
        progress_changed="NEW.progress IS DISTINCT FROM OLD.progress",
        waiting_present="NEW.waiting IS NOT NULL AND jsonb_typeof(NEW.waiting) <> 'null'",
        waiting_changed="NEW.waiting IS DISTINCT FROM OLD.waiting",
    )


def _sqlite_name() -> str:
    return _NAME.format(
        progress_present="NEW.progress IS NOT NULL AND NEW.progress <> 'null'",
        progress_changed="NEW.progress IS NOT OLD.progress",
        waiting_present="NEW.waiting IS NOT NULL AND NEW.waiting <> 'null'",
        waiting_changed="NEW.waiting IS NOT OLD.waiting",
    )


def create_triggers() -> None:
    """The two triggers on jobs (and on Postgres their function), in the schema the
    platform's tables are in: a host's own session, whose search_path may not name it,
    fires them too."""
    bind = op.get_bind()
    if bind.dialect.name == "postgresql":
        schema = bind.execute(sa.text("SELECT current_schema()")).scalar_one()
        quoted = bind.dialect.identifier_preparer.quote_identifier(schema)
        op.execute(_PG_FUNCTION.format(schema=quoted, name=_pg_name()))
        changed = " OR ".join(f"OLD.{c} IS DISTINCT FROM NEW.{c}" for c in _WATCHED)
        op.execute(
            f"CREATE TRIGGER jobrail_job_enqueued AFTER INSERT ON {quoted}.jobs "
            f"FOR EACH ROW EXECUTE FUNCTION {quoted}.jobrail_job_event()"
        )
        op.execute(
            f"CREATE TRIGGER jobrail_job_changed AFTER UPDATE ON {quoted}.jobs "
            f"FOR EACH ROW WHEN ({changed}) EXECUTE FUNCTION {quoted}.jobrail_job_event()"
        )
        return
    columns = "tx, tenant_id, job_id, job_type, name, at, data"
    op.execute(
        # Constants only: nothing here comes from outside the migration.
        "CREATE TRIGGER jobrail_job_enqueued AFTER INSERT ON jobs BEGIN "  # noqa: S608
        f"INSERT INTO job_events ({columns}) VALUES "
        f"(0, NEW.tenant_id, NEW.id, NEW.type, 'enqueued', {_SQLITE_NOW}, {_SQLITE_DATA}); "
        "END"
    )
    changed = " OR ".join(f"OLD.{c} IS NOT NEW.{c}" for c in _WATCHED)
    op.execute(
        f"CREATE TRIGGER jobrail_job_changed AFTER UPDATE ON jobs WHEN {changed} BEGIN "  # noqa: S608
        f"INSERT INTO job_events ({columns}) "
        f"SELECT 0, NEW.tenant_id, NEW.id, NEW.type, event.name, {_SQLITE_NOW}, {_SQLITE_DATA} "
        f"FROM (SELECT {_sqlite_name()} AS name) AS event WHERE event.name IS NOT NULL; "
        "END"
    )


def drop_triggers() -> None:
    bind = op.get_bind()
    if bind.dialect.name == "postgresql":
        op.execute("DROP TRIGGER IF EXISTS jobrail_job_changed ON jobs")
        op.execute("DROP TRIGGER IF EXISTS jobrail_job_enqueued ON jobs")
        op.execute("DROP FUNCTION IF EXISTS jobrail_job_event()")
        return
    op.execute("DROP TRIGGER IF EXISTS jobrail_job_changed")
    op.execute("DROP TRIGGER IF EXISTS jobrail_job_enqueued")


def upgrade() -> None:
    op.create_table(
        "job_events",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True),
        sa.Column("tx", sa.BigInteger, nullable=False),
        sa.Column("tenant_id", sa.String(64), nullable=False),
        sa.Column("job_id", sa.Uuid, nullable=False),
        sa.Column("job_type", sa.String(128), nullable=False),
        sa.Column("name", sa.String(16), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("data", Json, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_job_events"),
        # AUTOINCREMENT: SQLite must never give a pruned id again, or a client resuming
        # after it would skip the new event.
        sqlite_autoincrement=True,
    )
    op.create_index("ix_job_events_tenant_tx_id", "job_events", ["tenant_id", "tx", "id"])
    op.create_index("ix_job_events_job_id", "job_events", ["job_id", "id"])
    op.create_index("ix_job_events_tx_id", "job_events", ["tx", "id"])
    op.create_table(
        "webhooks",
        sa.Column("id", sa.Uuid, nullable=False),
        sa.Column("tenant_id", sa.String(64), nullable=False),
        sa.Column("url", sa.String(2048), nullable=False),
        sa.Column("secret", sa.String(128), nullable=False),
        sa.Column("events", Json, nullable=False),
        sa.Column("start_tx", sa.BigInteger, nullable=False),
        sa.Column("start_event_id", sa.BigInteger, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("deleted_at", sa.DateTime(timezone=True)),
        sa.PrimaryKeyConstraint("id", name="pk_webhooks"),
    )
    op.create_index("ix_webhooks_tenant_id", "webhooks", ["tenant_id"])
    op.create_table(
        "webhook_relay",
        sa.Column("id", sa.Integer, nullable=False),
        sa.Column("tx", sa.BigInteger, nullable=False),
        sa.Column("event_id", sa.BigInteger, nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_webhook_relay"),
    )
    op.execute(
        "INSERT INTO webhook_relay (id, tx, event_id, updated_at) "
        "VALUES (1, 0, 0, CURRENT_TIMESTAMP)"
    )
    create_triggers()


def downgrade() -> None:
    drop_triggers()
    op.drop_table("webhook_relay")
    op.drop_index("ix_webhooks_tenant_id", table_name="webhooks")
    op.drop_table("webhooks")
    op.drop_index("ix_job_events_tx_id", table_name="job_events")
    op.drop_index("ix_job_events_job_id", table_name="job_events")
    op.drop_index("ix_job_events_tenant_tx_id", table_name="job_events")
    op.drop_table("job_events")
