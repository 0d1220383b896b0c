"""The platform's tables (the operators' own are in operator_tables, re-exported here).
Its Alembic chain (store/migrations) is the only way they change."""

from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    Column,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    SmallInteger,
    String,
    Table,
    Text,
    Uuid,
    false,
    text,
)

from jobrail.store.column_types import Json as Json
from jobrail.store.column_types import UtcDateTime as UtcDateTime
from jobrail.store.operator_tables import ops_samples as ops_samples
from jobrail.store.operator_tables import ops_sessions as ops_sessions
from jobrail.store.operator_tables import workers as workers
from jobrail.store.table_base import NAMING_CONVENTION as NAMING_CONVENTION
from jobrail.store.table_base import metadata as metadata

# fmt: off
JOB_STATUSES = (
    "pending", "running", "retrying", "succeeded", "failed", "cancelled", "blocked", "expired",
)
# fmt: on

# A query must say it the same way, with the literal and not a bound parameter, for the
# planners to use the partial index on it (a generic plan, or SQLite, cannot otherwise).
WEBHOOK_DELIVERIES = text("type = 'webhooks.deliver'")
ACTIVE_UNIQUE = text("unique_key IS NOT NULL AND status IN ('pending', 'retrying', 'running')")
WAITING_DEADLINE = text("deadline IS NOT NULL AND status IN ('pending', 'retrying')")
PENDING_DEBOUNCE = text("debounce_key IS NOT NULL AND status = 'pending'")
HELD = text("held_since IS NOT NULL AND status IN ('pending', 'retrying')")
KEYED_IDEMPOTENCY = text("idempotency_key IS NOT NULL")
KEYED_UNIQUE = text("unique_key IS NOT NULL")
# Jobs not ended yet: the console's live counts and queue depths read these alone.
LIVE = text("status IN ('pending', 'running', 'retrying', 'blocked')")
FINISHED = text("finished_at IS NOT NULL")
STARTED = text("started_at IS NOT NULL")
FAILED = text("status = 'failed'")
HELD_LATER = text(
    "held_since IS NOT NULL AND status IN ('pending', 'retrying') AND run_after IS NOT NULL"
)


def _partial(name: str, *columns: str, where: Any, unique: bool = False) -> Index:
    """An index over the rows `where` holds, alike on Postgres and SQLite."""
    return Index(name, *columns, unique=unique, postgresql_where=where, sqlite_where=where)


jobs = Table(
    "jobs",
    metadata,
    Column("id", Uuid, primary_key=True),
    Column("tenant_id", String(64), nullable=False),
    Column("type", String(128), nullable=False),
    Column("queue", String(128), nullable=False),
    Column("status", String(16), nullable=False),
    Column("entity_id", String(255)),
    Column("idempotency_key", String(255)),
    Column("payload", Json, nullable=False),
    Column("result", Json),
    Column("attempts", Integer, nullable=False, server_default=text("0")),
    Column("max_attempts", Integer, nullable=False),
    Column("last_error", Text),
    Column("trace_context", Json, nullable=False),
    Column("cancel_requested", Boolean, nullable=False, server_default=text("false")),
    Column("created_at", UtcDateTime, nullable=False),
    Column("updated_at", UtcDateTime, nullable=False),
    Column("started_at", UtcDateTime),
    Column("finished_at", UtcDateTime),
    Column("run_after", UtcDateTime),
    Column("lease_until", UtcDateTime),
    # What a job the limits defer waits for (jobrail.jobs.domain.Wait), or NULL.
    Column("waiting", Json),
    # {"current", "total", "message", "updated_at"}: the latest an attempt reported.
    Column("progress", Json),
    # The batch or chain the job belongs to (flows.id), its part in it and its place.
    Column("flow_id", Uuid),
    Column("flow_role", String(16)),
    Column("flow_step", Integer),
    # Not started by then, the job ends expired and never runs (jobrail.jobs.domain).
    Column("deadline", UtcDateTime),
    # While the job is active, an enqueue of its tenant and type with this key returns it.
    Column("unique_key", String(255)),
    # While the job is pending, an enqueue of its tenant and type with this key replaces
    # its payload instead of making a new job (it runs once, with the last).
    Column("debounce_key", String(255)),
    # Fair dispatch (jobrail.dispatch): since when the job waits for the dispatcher to
    # release it (NULL: released, or never held), and its place in its tenant's line.
    Column("held_since", UtcDateTime),
    Column("rank_at", UtcDateTime),
    Column("fair_key", String(255), nullable=False, server_default=text("''")),  # its line
    # Its priority (jobrail.jobs.priority: 0 low, 1 normal, 2 high, 3 urgent).
    Column("priority", SmallInteger, nullable=False, server_default=text("1")),
    CheckConstraint("status IN (" + ", ".join(f"'{s}'" for s in JOB_STATUSES) + ")", name="status"),
    CheckConstraint("attempts >= 0 AND max_attempts >= 1", name="attempts"),
    # One job per tenant and idempotency key (NULL keys never collide).
    Index("uq_jobs_tenant_idempotency_key", "tenant_id", "idempotency_key", unique=True),
    Index("ix_jobs_tenant_created", "tenant_id", "created_at"),
    Index("ix_jobs_tenant_status_created", "tenant_id", "status", "created_at"),
    Index("ix_jobs_tenant_entity_created", "tenant_id", "entity_id", "created_at"),
    Index("ix_jobs_status_created", "status", "created_at"),
    _partial("ix_jobs_flow", "flow_id", "flow_step", where=text("flow_id IS NOT NULL")),
    # A key is taken only while its job is active: one that has ended frees it.
    _partial(
        "uq_jobs_active_unique_key",
        "tenant_id",
        "type",
        "unique_key",
        where=ACTIVE_UNIQUE,
        unique=True,
    ),
    _partial(
        "uq_jobs_pending_debounce_key",
        "tenant_id",
        "type",
        "debounce_key",
        where=PENDING_DEBOUNCE,
        unique=True,
    ),
    # The jobs that wait with a deadline, for the sweep that expires them.
    _partial("ix_jobs_waiting_deadline", "deadline", where=WAITING_DEADLINE),
    # The held jobs of each queue, tenant and key in the order the dispatcher releases them,
    # and those due later by when (the dispatcher looks for the ones just due).
    _partial("ix_jobs_held_lines", "queue", "tenant_id", "fair_key", "rank_at", "id", where=HELD),
    _partial("ix_jobs_held_due", "queue", "run_after", where=HELD_LATER),
    # The ops page's webhook deliveries of the last day (jobrail.webhooks): the delivery
    # jobs alone, so its refreshes read those and not every job of the day.
    _partial(
        "ix_jobs_webhook_deliveries", "created_at", "tenant_id", "status", where=WEBHOOK_DELIVERIES
    ),
    # The console's job list (jobrail.ops.persistence.SqlaJobSearch): every tenant's jobs
    # newest first, by type or by queue, and found by a key whatever their tenant.
    Index("ix_jobs_created_id", "created_at", "id"),
    Index("ix_jobs_type_created", "type", "created_at"),
    Index("ix_jobs_queue_created", "queue", "created_at"),
    _partial("ix_jobs_idempotency_key", "idempotency_key", where=KEYED_IDEMPOTENCY),
    _partial("ix_jobs_unique_key", "unique_key", where=KEYED_UNIQUE),
    # The console's overview (jobrail.ops.overview) and its samples (jobrail.maintenance
    # .sampling): jobs not ended by status and queue, jobs finished and started by minute,
    # and the newest failures.
    _partial("ix_jobs_live", "status", "queue", "type", where=LIVE),
    _partial("ix_jobs_finished", "finished_at", "type", "status", where=FINISHED),
    Index(
        "ix_jobs_started",
        "started_at",
        postgresql_include=["created_at", "run_after"],
        postgresql_where=STARTED,
        sqlite_where=STARTED,
    ),
    _partial("ix_jobs_failed_finished", "finished_at", where=FAILED),
)

# Per queue under fair dispatch: its dispatcher's lease (`term` grows with each holder)
# and its drain's figures (estimates); its fast path's credit (dispatch_gates).
dispatch_queues = Table(
    "dispatch_queues",
    metadata,
    Column("queue", String(128), primary_key=True),
    Column("holder", String(128)),
    Column("term", Integer, nullable=False, server_default=text("0")),
    Column("lease_until", UtcDateTime),
    Column("drain_per_s", Float),
    Column("active_weight", Float),
)
dispatch_gates = Table(
    "dispatch_gates",
    metadata,
    Column("queue", String(128), primary_key=True),
    Column("credit", Integer, nullable=False, server_default=text("0")),
    Column("spent", Boolean, nullable=False, server_default=false()),  # a job held since
)

# The lines whose held jobs arrived since their dispatcher last took these notes.
dispatch_arrivals = Table(
    "dispatch_arrivals",
    metadata,
    Column("queue", String(128), primary_key=True),
    Column("tenant_id", String(64), primary_key=True),
    Column("fair_key", String(255), primary_key=True),
)

# What an operator paused (jobrail.dispatch.pauses): nothing of it starts until resumed.
PAUSE_SCOPES = ("queue", "type", "tenant")
dispatch_pauses = Table(
    "dispatch_pauses",
    metadata,
    Column("scope", String(16), primary_key=True),
    Column("value", String(128), primary_key=True),
    Column("paused_at", UtcDateTime, nullable=False),
    CheckConstraint("scope IN ('queue', 'type', 'tenant')", name="scope"),
)

FLOW_KINDS = ("batch", "chain")
FLOW_STATUSES = ("running", "succeeded", "failed", "cancelled")

# Batches and chains (jobrail.jobs.flow): the counts of their members' ends, kept
# exact by the transactions that record those ends (each locks the row first).
flows = Table(
    "flows",
    metadata,
    Column("id", Uuid, primary_key=True),
    Column("tenant_id", String(64), nullable=False),
    Column("kind", String(16), nullable=False),
    Column("status", String(16), nullable=False),
    Column("name", String(255)),
    Column("idempotency_key", String(255)),
    Column("total", Integer, nullable=False),
    Column("succeeded", Integer, nullable=False, server_default=text("0")),
    Column("failed", Integer, nullable=False, server_default=text("0")),
    Column("cancelled", Integer, nullable=False, server_default=text("0")),
    Column("cancel_requested", Boolean, nullable=False, server_default=text("false")),
    # {"then": job id, "catch": ..., "finally": ...}
    Column("callbacks", Json, nullable=False),
    Column("created_at", UtcDateTime, nullable=False),
    Column("updated_at", UtcDateTime, nullable=False),
    Column("finished_at", UtcDateTime),
    CheckConstraint("kind IN (" + ", ".join(f"'{k}'" for k in FLOW_KINDS) + ")", name="kind"),
    CheckConstraint(
        "status IN (" + ", ".join(f"'{s}'" for s in FLOW_STATUSES) + ")", name="status"
    ),
    CheckConstraint(
        "succeeded >= 0 AND failed >= 0 AND cancelled >= 0 "
        "AND succeeded + failed + cancelled <= total",
        name="counts",
    ),
    Index("uq_flows_tenant_idempotency_key", "tenant_id", "idempotency_key", unique=True),
    Index("ix_flows_tenant_created", "tenant_id", "created_at"),
    Index("ix_flows_finished", "finished_at"),
    # The ops page's list: every tenant's, the newest first.
    Index("ix_flows_created", "created_at"),
)

# The job event feed (jobrail.events.feed): one row per change of a job that a client may
# follow, written by triggers on `jobs` (migration 0013) in every path's own transaction.
# `tx` is the writing transaction's id on Postgres (0 on SQLite, whose writers are
# serial), or the job's previous event's if that is larger (a transaction that waited for
# the job's row behind a younger one): a reader takes only rows whose `tx` is older than
# every transaction still open, so ordered by (tx, id) the feed never gains a row behind
# a cursor already handed out, and a job's events are in the order of its changes.
job_events = Table(
    "job_events",
    metadata,
    Column("id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True),
    Column("tx", BigInteger, nullable=False),
    Column("tenant_id", String(64), nullable=False),
    Column("job_id", Uuid, nullable=False),
    Column("job_type", String(128), nullable=False),
    Column("name", String(16), nullable=False),
    Column("at", UtcDateTime, nullable=False),
    # {"status", "attempts", "last_error", "run_after", "progress", "waiting", "flow_id"}
    Column("data", Json, nullable=False),
    Index("ix_job_events_tenant_tx_id", "tenant_id", "tx", "id"),
    Index("ix_job_events_job_id", "job_id", "id"),
    Index("ix_job_events_tx_id", "tx", "id"),
    sqlite_autoincrement=True,
)

# Each failed attempt's error and traceback (jobrail.worker.failures), for the console's
# job page; written by the worker after the attempt's outcome, gone with its job.
job_attempt_failures = Table(
    "job_attempt_failures",
    metadata,
    Column("id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True),
    Column("job_id", Uuid, ForeignKey("jobs.id", ondelete="CASCADE"), nullable=False),
    Column("attempt", Integer, nullable=False),
    Column("at", UtcDateTime, nullable=False),
    Column("error", Text, nullable=False),
    Column("traceback", Text, nullable=False),
    Index("ix_job_attempt_failures_job_id", "job_id", "id"),
    sqlite_autoincrement=True,
)

# Webhooks (jobrail.webhooks): where a tenant's job events are POSTed, signed with its
# secret. The secret is stored as given: a signature needs it.
webhooks = Table(
    "webhooks",
    metadata,
    Column("id", Uuid, primary_key=True),
    Column("tenant_id", String(64), nullable=False),
    Column("url", String(2048), nullable=False),
    Column("secret", String(128), nullable=False),
    # The event names it receives.
    Column("events", Json, nullable=False),
    # The feed's head when it was made: it receives the events after it.
    Column("start_tx", BigInteger, nullable=False),
    Column("start_event_id", BigInteger, nullable=False),
    Column("created_at", UtcDateTime, nullable=False),
    Column("deleted_at", UtcDateTime),
    Index("ix_webhooks_tenant_id", "tenant_id"),
)

# The webhook relay's position in the event feed: one row, locked by the relay that
# turns events into deliveries, so two relays never enqueue the same event twice.
webhook_relay = Table(
    "webhook_relay",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("tx", BigInteger, nullable=False),
    Column("event_id", BigInteger, nullable=False),
    Column("updated_at", UtcDateTime, nullable=False),
)

outbox = Table(
    "outbox",
    metadata,
    Column("id", Uuid, primary_key=True),
    Column("queue", String(128), nullable=False),
    Column("body", LargeBinary, nullable=False),
    Column("headers", Json, nullable=False),
    Column("not_before", UtcDateTime),
    Column("created_at", UtcDateTime, nullable=False),
    Column("published_at", UtcDateTime),
    Column("attempts", Integer, nullable=False, server_default=text("0")),
    Column("last_error", Text),
    # The relay's access path: unpublished rows, oldest first.
    Index(
        "ix_outbox_unpublished_created",
        "created_at",
        postgresql_where=text("published_at IS NULL"),
        sqlite_where=text("published_at IS NULL"),
    ),
    # Retention's access path: published rows, oldest first (jobrail.maintenance).
    Index(
        "ix_outbox_published",
        "published_at",
        postgresql_where=text("published_at IS NOT NULL"),
        sqlite_where=text("published_at IS NOT NULL"),
    ),
)

inbox = Table(
    "inbox",
    metadata,
    Column("consumer", String(128), primary_key=True),
    Column("message_id", String(255), primary_key=True),
    Column("processed_at", UtcDateTime, nullable=False),
    Index("ix_inbox_processed", "processed_at"),
)

tenants = Table(
    "tenants",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("admin", Boolean, nullable=False, server_default=text("false")),
    Column("created_at", UtcDateTime, nullable=False),
    # At most this many of the tenant's jobs wait to start (pending, retrying): the next
    # enqueue is refused (429). NULL: no cap.
    Column("max_queued", Integer),
    # Its share of a queue's workers under fair dispatch (jobrail.dispatch); NULL: 1.
    Column("weight", Float),
)

api_keys = Table(
    "api_keys",
    metadata,
    Column("id", Uuid, primary_key=True),
    Column("tenant_id", String(64), ForeignKey("tenants.id"), nullable=False),
    # SHA-256 of the key, hex: the key itself is never stored.
    Column("digest", String(64), nullable=False),
    Column("hint", String(16), nullable=False),
    Column("created_at", UtcDateTime, nullable=False),
    Column("revoked_at", UtcDateTime),
    Index("uq_api_keys_digest", "digest", unique=True),
    Index("ix_api_keys_tenant_id", "tenant_id"),
)
