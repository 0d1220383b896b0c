"""The SQL of the hot paths on Postgres, all in this one module, each statement named:
what the worker's job store (``store/pg_job_store.py``) and the API's intake and outbox
marks (``store/pg_intake.py``) run, through asyncpg directly.

Enqueue, claim and record run on every job, so they skip the ORM layer and the
explicit transaction: each is a single statement in autocommit mode, atomic on its
own (a data-modifying CTE writes the job and its message together). The SQLAlchemy
store (``store/jobs.py``) has the same behaviour for SQLite; the contract tests
in ``tests/contracts`` hold both, and the fakes, to the same rules.
"""

from jobrail.store.tables import jobs

COLUMNS = ", ".join(column.name for column in jobs.columns)
# ENQUEUE binds values in this order; the columns after them start NULL.
ENQUEUED = (
    "id, tenant_id, type, queue, status, entity_id, idempotency_key, payload, result, "
    "attempts, max_attempts, last_error, trace_context, cancel_requested, created_at, "
    "updated_at, started_at, finished_at, run_after, lease_until"
)
# A job enqueued alone belongs to no flow (batches and chains are written in a unit of
# work, jobrail.jobs.workflows).
assert f"{ENQUEUED}, waiting, progress, flow_id, flow_role, flow_step" == COLUMNS, (
    "the jobs table changed: update ENQUEUE's parameters"
)

# The SQL below is assembled from constants only; every value is a bind parameter.
GET = f"SELECT {COLUMNS} FROM jobs WHERE id = $1"

CLAIM = f"""
UPDATE jobs
   SET status = 'running', attempts = attempts + 1, started_at = $2, updated_at = $2,
       lease_until = $3, run_after = NULL, waiting = NULL
 WHERE id = $1
   AND ((status IN ('pending', 'retrying') AND (run_after IS NULL OR run_after <= $4))
        OR (status = 'running' AND lease_until <= $2))
   AND ($5::text IS NULL OR tenant_id = $5) AND ($6::text IS NULL OR type = $6)
RETURNING {COLUMNS}
"""

_OUTBOX_ROWS = """
SELECT * FROM unnest($12::uuid[], $13::text[], $14::bytea[], $15::jsonb[],
                     $16::timestamptz[], $17::timestamptz[])
"""

RECORD = f"""
WITH updated AS (
    UPDATE jobs
       SET status = $3, attempts = $4, last_error = $5, result = $6, updated_at = $7,
           started_at = $8, finished_at = $9, run_after = $10, lease_until = $11
     WHERE id = $1 AND status = 'running' AND attempts = $2 AND started_at = $18
    RETURNING id
), messages AS (
    INSERT INTO outbox (id, queue, body, headers, not_before, created_at)
    {_OUTBOX_ROWS} WHERE EXISTS (SELECT 1 FROM updated)
)
SELECT count(*) FROM updated
"""

# The same two statements for many jobs at once (see PgJobStore).
CLAIM_MANY = f"""
UPDATE jobs
   SET status = 'running', attempts = jobs.attempts + 1, started_at = c.now,
       updated_at = c.now, lease_until = c.lease_until, run_after = NULL, waiting = NULL
  FROM unnest($1::uuid[], $2::timestamptz[], $3::timestamptz[], $4::timestamptz[],
              $5::text[], $6::text[])
       AS c(id, now, lease_until, due_by, tenant_id, type)
 WHERE jobs.id = c.id
   AND ((jobs.status IN ('pending', 'retrying')
         AND (jobs.run_after IS NULL OR jobs.run_after <= c.due_by))
        OR (jobs.status = 'running' AND jobs.lease_until <= c.now))
   AND (c.tenant_id IS NULL OR jobs.tenant_id = c.tenant_id)
   AND (c.type IS NULL OR jobs.type = c.type)
RETURNING {", ".join(f"jobs.{column}" for column in COLUMNS.split(", "))}
"""

RECORD_MANY = """
UPDATE jobs
   SET status = r.status, attempts = r.attempts, last_error = r.last_error,
       result = r.result, updated_at = r.updated_at, started_at = r.started_at,
       finished_at = r.finished_at, run_after = r.run_after, lease_until = r.lease_until
  FROM unnest($1::uuid[], $2::int[], $3::timestamptz[], $4::text[], $5::int[], $6::text[],
              $7::jsonb[], $8::timestamptz[], $9::timestamptz[], $10::timestamptz[],
              $11::timestamptz[], $12::timestamptz[])
       AS r(id, claimed_attempt, claimed_at, status, attempts, last_error, result,
            updated_at, started_at, finished_at, run_after, lease_until)
 WHERE jobs.id = r.id AND jobs.status = 'running'
   AND jobs.attempts = r.claimed_attempt AND jobs.started_at = r.claimed_at
RETURNING jobs.id
"""

CANCEL_REQUESTED = "SELECT cancel_requested FROM jobs WHERE id = $1"

FLOW_MEMBERS = (
    f"SELECT {COLUMNS} FROM jobs WHERE flow_id = $1 AND flow_role = 'member' "
    "ORDER BY flow_step, created_at, id"
)

# What deferred jobs wait for, many at once; a note made before the job last changed
# (it started meanwhile, or was cancelled) is dropped.
NOTE_WAITS = """
UPDATE jobs SET waiting = n.waiting::jsonb
  FROM unnest($1::uuid[], $2::text[], $3::timestamptz[]) AS n(id, waiting, at)
 WHERE jobs.id = n.id AND jobs.status IN ('pending', 'retrying') AND jobs.updated_at <= n.at
"""

EXTEND_LEASE = """
UPDATE jobs SET lease_until = $4
 WHERE id = $1 AND status = 'running' AND attempts = $2 AND started_at = $3
RETURNING id
"""

WRITE_PROGRESS = """
UPDATE jobs SET progress = $4
 WHERE id = $1 AND status = 'running' AND attempts = $2 AND started_at = $3
RETURNING id
"""

WRITE_PROGRESS_MANY = """
UPDATE jobs SET progress = p.progress
  FROM unnest($1::uuid[], $2::int[], $3::timestamptz[], $4::jsonb[])
       AS p(id, claimed_attempt, claimed_at, progress)
 WHERE jobs.id = p.id AND jobs.status = 'running'
   AND jobs.attempts = p.claimed_attempt AND jobs.started_at = p.claimed_at
RETURNING jobs.id
"""

# Enqueue: the jobs of every request in the batch and their messages, in one statement.
# JSON documents arrive as text, encoded per request (a NUL is refused for that request
# alone, before any statement runs). A row whose key is taken (by an earlier row of the
# same batch too), or started a batch or chain, is left out, and so is its message. The
# marks of rows published since the last statement ride along (see PgOutboxMarks).
ENQUEUE = f"""
WITH added AS (
    INSERT INTO jobs ({ENQUEUED})
    SELECT id, tenant_id, type, queue, status, entity_id, idempotency_key, payload::jsonb,
           result::jsonb, attempts, max_attempts, last_error, trace_context::jsonb,
           cancel_requested, created_at, updated_at, started_at, finished_at, run_after,
           lease_until
      FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[],
                  $7::text[], $8::text[], $9::text[], $10::int[], $11::int[], $12::text[],
                  $13::text[], $14::bool[], $15::timestamptz[], $16::timestamptz[],
                  $17::timestamptz[], $18::timestamptz[], $19::timestamptz[],
                  $20::timestamptz[])
           WITH ORDINALITY AS j({ENQUEUED}, n)
     WHERE j.idempotency_key IS NULL
        OR NOT EXISTS (SELECT FROM flows
                        WHERE flows.tenant_id = j.tenant_id
                          AND flows.idempotency_key = j.idempotency_key)
     ORDER BY n
    ON CONFLICT (tenant_id, idempotency_key) DO NOTHING
    RETURNING id
), messages AS (
    INSERT INTO outbox (id, queue, body, headers, not_before, created_at)
    SELECT m.id, m.queue, m.body, m.headers::jsonb, m.not_before, m.created_at
      FROM unnest($21::uuid[], $22::uuid[], $23::text[], $24::bytea[], $25::text[],
                  $26::timestamptz[], $27::timestamptz[])
           AS m(job_id, id, queue, body, headers, not_before, created_at)
     WHERE m.job_id IN (SELECT id FROM added)
), marked AS (
    UPDATE outbox SET published_at = p.at
      FROM unnest($28::uuid[], $29::timestamptz[]) AS p(id, at)
     WHERE outbox.id = p.id
)
SELECT id FROM added
"""

BY_KEY = f"SELECT {COLUMNS} FROM jobs WHERE tenant_id = $1 AND idempotency_key = $2"

FLOW_BY_KEY = "SELECT kind FROM flows WHERE tenant_id = $1 AND idempotency_key = $2"

MARK_PUBLISHED = """
UPDATE outbox SET published_at = p.at
  FROM unnest($1::uuid[], $2::timestamptz[]) AS p(id, at)
 WHERE outbox.id = p.id
"""
