"""The operators' tables: the console's sessions and samples, and the workers' beats.
Part of the platform's tables (``jobrail.store.tables`` re-exports them)."""

from sqlalchemy import Column, Float, ForeignKey, Index, Integer, String, Table, Uuid

from jobrail.store.column_types import Json, UtcDateTime
from jobrail.store.table_base import metadata

# The ops page's sign-in sessions (jobrail.ops.console): one row per signed-in browser.
ops_sessions = Table(
    "ops_sessions",
    metadata,
    # SHA-256 of the session token, hex: the cookie holds the token, which is never stored,
    # so reading this table (or api_keys) gives nothing a browser could present.
    Column("digest", String(64), primary_key=True),
    # Each request checks this key is still live and an admin's: revoking it ends the
    # session at once.
    Column("key_id", Uuid, ForeignKey("api_keys.id"), nullable=False),
    Column("created_at", UtcDateTime, nullable=False),
    Column("expires_at", UtcDateTime, nullable=False),
    Index("ix_ops_sessions_key_id", "key_id"),
    Index("ix_ops_sessions_expires_at", "expires_at"),
)

# The console's overview over time (jobrail.maintenance.sampling writes it each minute,
# jobrail.ops reads it): one row per metric, minute and label (a job type and status, a
# queue), kept a day.
ops_samples = Table(
    "ops_samples",
    metadata,
    Column("metric", String(32), primary_key=True),
    Column("minute", UtcDateTime, primary_key=True),
    Column("label", String(255), primary_key=True),
    Column("value", Float, nullable=False),
    Index("ix_ops_samples_minute", "minute"),
)

# Each process that runs jobs, as its last beat said (jobrail.workers_seen).
workers = Table(
    "workers",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("host", String(255), nullable=False),
    Column("pid", Integer, nullable=False),
    Column("version", String(64), nullable=False),
    Column("queues", Json, nullable=False),
    Column("concurrency", Integer, nullable=False),
    Column("running", Json, nullable=False),
    Column("started_at", UtcDateTime, nullable=False),
    Column("beat_at", UtcDateTime, nullable=False),
    Column("stopped_at", UtcDateTime),
)
