"""The hot paths on Postgres, in asyncpg directly: one statement, one round trip each.

Enqueue, claim and record run on every job, so they skip the ORM layer and the
explicit transaction: each is a single statement in autocommit mode, atomic on its
own (a data-modifying CTE writes the job and its message together). The SQLAlchemy
store (``store/jobs.py``) has the same behaviour for SQLite; the contract tests
in ``tests/contracts`` hold both, and the fakes, to the same rules.
"""

import asyncio
import json
import logging
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import asyncpg
from sqlalchemy.engine import make_url

from jobrail.jobs.domain import DUE_TOLERANCE, Job, JobProgress
from jobrail.jobs.messages import JobMessage, Outgoing
from jobrail.jobs.ports import ClaimResult, ClaimToken, JobIdentity, WaitNote
from jobrail.kernel.batching import Coalescer
from jobrail.kernel.errors import ConflictError, InvalidInputError, StoreUnavailableError
from jobrail.kernel.ids import JobId
from jobrail.settings import DatabaseSettings
from jobrail.store import json_codec
from jobrail.store.errors import UNAVAILABLE_DRIVER_ERRORS, summary
from jobrail.store.mapping import job_from_row, progress_document
from jobrail.store.platform_schema import search_path_sql
from jobrail.store.tables import jobs
from jobrail.transport.codec import Envelope, encode

log = logging.getLogger("jobrail.outbox")

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

PgPool = asyncpg.Pool

_UNAVAILABLE = UNAVAILABLE_DRIVER_ERRORS


async def _init(connection: asyncpg.Connection) -> None:
    for kind in ("json", "jsonb"):
        await connection.set_type_codec(
            kind, encoder=json_codec.dumps, decoder=json.loads, schema="pg_catalog"
        )


async def _keep_session(connection: asyncpg.Connection) -> None:
    """Release without asyncpg's default reset (a RESET ALL round trip per release):
    these statements run alone, in autocommit, and change no session state. asyncpg
    still rolls back a connection left inside a transaction."""


async def create_pool(settings: DatabaseSettings) -> asyncpg.Pool:
    url = make_url(settings.url.get_secret_value()).set(drivername="postgresql")
    schema = settings.schema_

    async def init(connection: asyncpg.Connection) -> None:
        await _init(connection)
        if schema is not None:  # the statements above name the tables bare
            await connection.execute(search_path_sql(schema))

    pool = asyncpg.create_pool(
        url.render_as_string(hide_password=False),
        min_size=0,  # connect on first use: a process starts even with the database down
        max_size=settings.pool_size,
        timeout=settings.connect_timeout_s,
        command_timeout=settings.pool_timeout_s * 3,
        init=init,
        reset=_keep_session,
    )
    return await pool


class _Pg:
    def __init__(self, pool: asyncpg.Pool) -> None:
        # No acquire timeout: asyncpg's wait_for costs a task per call; a pool with no
        # free connection waits for one, and an unreachable server fails at connect.
        self._pool = pool

    async def _fetchrow(self, query: str, *args: Any) -> Any:
        try:
            async with self._pool.acquire() as connection:
                try:
                    return await connection.fetchrow(query, *args)
                except asyncpg.InternalClientError:
                    _discard(connection)
                    raise
        except _UNAVAILABLE as exc:
            raise StoreUnavailableError(summary(exc)) from exc
        except asyncpg.DataError as exc:
            _raise_refused_value(exc)
            raise

    async def _fetch(self, query: str, *args: Any) -> list[Any]:
        try:
            async with self._pool.acquire() as connection:
                try:
                    rows: list[Any] = await connection.fetch(query, *args)
                    return rows
                except asyncpg.InternalClientError:
                    _discard(connection)
                    raise
        except _UNAVAILABLE as exc:
            raise StoreUnavailableError(summary(exc)) from exc
        except asyncpg.DataError as exc:
            _raise_refused_value(exc)
            raise

    async def _execute(self, query: str, *args: Any) -> None:
        try:
            async with self._pool.acquire() as connection:
                try:
                    await connection.execute(query, *args)
                except asyncpg.InternalClientError:
                    _discard(connection)
                    raise
        except _UNAVAILABLE as exc:
            raise StoreUnavailableError(summary(exc)) from exc
        except asyncpg.DataError as exc:
            _raise_refused_value(exc)
            raise


def _raise_refused_value(exc: asyncpg.DataError) -> None:
    """asyncpg wraps what a codec raised (json_codec refusing a NUL) in DataError: give
    the caller the codec's own error, which the API answers with a 422."""
    if isinstance(exc.__cause__, InvalidInputError):
        raise exc.__cause__ from None


def _discard(connection: asyncpg.Connection) -> None:
    """A connection the server dropped in the middle of a statement can be left in a
    state asyncpg refuses to use again ("cannot switch to state ...; another operation
    is in progress"): close it, so that the pool opens a new one for the retry."""
    connection.terminate()


def _outbox_args(outgoing: Sequence[Outgoing], at: datetime) -> list[Any]:
    messages = [encode(message) for message in outgoing]
    return [
        [m.id for m in messages],
        [m.queue for m in messages],
        [m.body for m in messages],
        [dict(m.headers) for m in messages],
        [m.not_before for m in messages],
        [at for _ in messages],
    ]


@dataclass(frozen=True, slots=True)
class _Claim:
    job_id: JobId
    now: datetime
    lease_until: datetime
    due_by: datetime
    expect: JobIdentity | None


class PgJobStore(_Pg):
    """The worker's job store (see JobStore): one statement per call, and claims,
    records and progress writes made in the same loop turn share one statement."""

    def __init__(self, pool: asyncpg.Pool, window_s: float = 0.0) -> None:
        super().__init__(pool)
        self._claims: Coalescer[_Claim, Job | None] = Coalescer(self._claim_many, window_s)
        self._records: Coalescer[tuple[Job, ClaimToken], bool] = Coalescer(
            self._record_many, window_s
        )
        self._progress: Coalescer[tuple[JobId, ClaimToken, JobProgress], bool] = Coalescer(
            self._write_progress_many, window_s
        )

    async def get(self, job_id: JobId) -> Job | None:
        row = await self._fetchrow(GET, job_id)
        return job_from_row(row) if row else None

    async def claim(
        self, job_id: JobId, now: datetime, lease: timedelta, expect: JobIdentity | None = None
    ) -> ClaimResult:
        job = await self._claims.submit(
            _Claim(job_id, now, now + lease, now + DUE_TOLERANCE, expect)
        )
        if job is not None:
            return ClaimResult(job=job)
        return ClaimResult(job=None, current=await self.get(job_id))

    async def _claim_many(self, claims: Sequence[_Claim]) -> list[Job | None]:
        if len(claims) == 1:
            c = claims[0]
            row = await self._fetchrow(
                CLAIM,
                c.job_id,
                c.now,
                c.lease_until,
                c.due_by,
                c.expect.tenant_id if c.expect else None,
                c.expect.job_type if c.expect else None,
            )
            return [job_from_row(row) if row else None]
        rows = await self._fetch(
            CLAIM_MANY,
            [c.job_id for c in claims],
            [c.now for c in claims],
            [c.lease_until for c in claims],
            [c.due_by for c in claims],
            [c.expect.tenant_id if c.expect else None for c in claims],
            [c.expect.job_type if c.expect else None for c in claims],
        )
        claimed = {row["id"]: job_from_row(row) for row in rows}
        # A job asked for twice in one turn is claimed once: the first asker gets it.
        return [claimed.pop(c.job_id, None) for c in claims]

    async def record(self, job: Job, claim: ClaimToken, outbox: Sequence[Outgoing]) -> bool:
        if not outbox:
            return await self._records.submit((job, claim))
        return await self._record_one(job, claim, outbox)

    async def _record_one(self, job: Job, claim: ClaimToken, outbox: Sequence[Outgoing]) -> bool:
        row = await self._fetchrow(
            RECORD,
            job.id,
            claim.attempt,
            job.status.value,
            job.attempts,
            job.last_error,
            job.result,
            job.updated_at,
            job.started_at,
            job.finished_at,
            job.run_after,
            job.lease_until,
            *_outbox_args(outbox, job.updated_at),
            claim.started_at,
        )
        return bool(row and row[0])

    async def _record_many(self, records: Sequence[tuple[Job, ClaimToken]]) -> list[bool]:
        if len(records) == 1:
            return [await self._record_one(*records[0], ())]
        jobs_ = [job for job, _ in records]
        rows = await self._fetch(
            RECORD_MANY,
            [job.id for job in jobs_],
            [claim.attempt for _, claim in records],
            [claim.started_at for _, claim in records],
            [job.status.value for job in jobs_],
            [job.attempts for job in jobs_],
            [job.last_error for job in jobs_],
            [job.result for job in jobs_],
            [job.updated_at for job in jobs_],
            [job.started_at for job in jobs_],
            [job.finished_at for job in jobs_],
            [job.run_after for job in jobs_],
            [job.lease_until for job in jobs_],
        )
        written = {row["id"] for row in rows}
        return [job.id in written for job in jobs_]

    async def extend_lease(self, job_id: JobId, claim: ClaimToken, until: datetime) -> bool:
        row = await self._fetchrow(EXTEND_LEASE, job_id, claim.attempt, claim.started_at, until)
        return row is not None

    async def cancel_requested(self, job_id: JobId) -> bool:
        row = await self._fetchrow(CANCEL_REQUESTED, job_id)
        return bool(row and row[0])

    async def flow_members(self, flow_id: uuid.UUID) -> list[Job]:
        return [job_from_row(row) for row in await self._fetch(FLOW_MEMBERS, flow_id)]

    async def note_waits(self, notes: Sequence[WaitNote]) -> None:
        if notes:
            await self._execute(
                NOTE_WAITS,
                [n.job_id for n in notes],
                [json.dumps(n.wait.as_json()) for n in notes],
                [n.at for n in notes],
            )

    async def write_progress(self, job_id: JobId, claim: ClaimToken, progress: JobProgress) -> bool:
        return await self._progress.submit((job_id, claim, progress))

    async def _write_progress_many(
        self, writes: Sequence[tuple[JobId, ClaimToken, JobProgress]]
    ) -> list[bool]:
        if len(writes) == 1:
            job_id, claim, progress = writes[0]
            row = await self._fetchrow(
                WRITE_PROGRESS, job_id, claim.attempt, claim.started_at, progress_document(progress)
            )
            return [row is not None]
        rows = await self._fetch(
            WRITE_PROGRESS_MANY,
            [job_id for job_id, _, _ in writes],
            [claim.attempt for _, claim, _ in writes],
            [claim.started_at for _, claim, _ in writes],
            [progress_document(progress) for _, _, progress in writes],
        )
        written = {row["id"] for row in rows}
        return [job_id in written for job_id, _, _ in writes]


@dataclass(frozen=True, slots=True)
class _Intake:
    """A job and its message, with their JSON documents encoded."""

    job: Job
    message: Envelope
    payload: str
    result: str | None
    trace_context: str
    headers: str

    @classmethod
    def of(
        cls, job: Job, message: JobMessage, encode: Callable[[Outgoing], Envelope] = encode
    ) -> "_Intake":
        envelope = encode(message)
        return cls(
            job,
            envelope,
            json_codec.dumps(job.payload),
            None if job.result is None else json_codec.dumps(job.result),
            json_codec.dumps(job.trace_context),
            json_codec.dumps(dict(envelope.headers)),
        )


class PgJobIntake(_Pg):
    """Adds a job and its message in one statement (see JobIntake). Adds made in the
    same loop turn (or window) share that statement ("group commit"); each caller
    still gets its own answer: its job, the job an earlier request made with its key,
    a conflict, or its own refusal."""

    def __init__(
        self,
        pool: asyncpg.Pool,
        window_s: float = 0.0,
        marks: "PgOutboxMarks | None" = None,
        encode: Callable[[Outgoing], Envelope] = encode,
    ) -> None:
        super().__init__(pool)
        self._adds: Coalescer[_Intake, bool] = Coalescer(self._add_many, window_s)
        self._marks = marks
        self._encode = encode  # shared with the fast path (RecentEncodings)

    async def add(self, job: Job, message: JobMessage) -> Job:
        if await self._adds.submit(_Intake.of(job, message, self._encode)):
            return job
        existing = await self._fetchrow(BY_KEY, job.tenant_id, job.idempotency_key)
        if existing is not None:
            return job_from_row(existing)
        flow = await self._fetchrow(FLOW_BY_KEY, job.tenant_id, job.idempotency_key)
        if flow is not None:
            raise ConflictError(
                f"Idempotency-Key {job.idempotency_key!r} was already used for a {flow['kind']}"
            )
        raise ConflictError("a job with this Idempotency-Key is being created; try again")

    async def _add_many(self, adds: Sequence[_Intake]) -> Sequence[bool | BaseException]:
        try:
            return await self._insert(adds)
        except (asyncpg.DataError, asyncpg.IntegrityConstraintViolationError, InvalidInputError):
            if len(adds) == 1:
                raise
        # One row the server refused (a value out of range, a NUL in a text column)
        # must not fail the requests it shared the statement with: each alone.
        results: list[bool | BaseException] = []
        for add in adds:
            try:
                results.extend(await self._insert([add]))
            except Exception as exc:  # noqa: BLE001 - handed to that caller
                results.append(exc)
        return results

    async def _insert(self, adds: Sequence[_Intake]) -> list[bool]:
        jobs_ = [add.job for add in adds]
        messages = [add.message for add in adds]
        marks = self._marks.take() if self._marks is not None else []
        try:
            rows = await self._fetch(ENQUEUE, *self._arguments(adds, jobs_, messages, marks))
        except BaseException:
            if self._marks is not None:
                self._marks.give_back(marks)
            raise
        added = {row["id"] for row in rows}
        return [job.id in added for job in jobs_]

    @staticmethod
    def _arguments(
        adds: Sequence[_Intake],
        jobs_: Sequence[Job],
        messages: Sequence[Envelope],
        marks: Sequence[tuple[Any, datetime]],
    ) -> list[Any]:
        return [
            [job.id for job in jobs_],
            [job.tenant_id for job in jobs_],
            [job.type for job in jobs_],
            [job.queue for job in jobs_],
            [job.status.value for job in jobs_],
            [job.entity_id for job in jobs_],
            [job.idempotency_key for job in jobs_],
            [add.payload for add in adds],
            [add.result for add in adds],
            [job.attempts for job in jobs_],
            [job.max_attempts for job in jobs_],
            [job.last_error for job in jobs_],
            [add.trace_context for add in adds],
            [job.cancel_requested for job in jobs_],
            [job.created_at for job in jobs_],
            [job.updated_at for job in jobs_],
            [job.started_at for job in jobs_],
            [job.finished_at for job in jobs_],
            [job.run_after for job in jobs_],
            [job.lease_until for job in jobs_],
            [job.id for job in jobs_],
            [m.id for m in messages],
            [m.queue for m in messages],
            [m.body for m in messages],
            [add.headers for add in adds],
            [m.not_before for m in messages],
            [job.created_at for job in jobs_],
            [row_id for row_id, _ in marks],
            [at for _, at in marks],
        ]


class PgOutboxMarks(_Pg):
    """Marks outbox rows published, a moment later: the marks wait for the next enqueue
    statement, which carries them (PgJobIntake), or at most `delay_s` before going in
    a statement of their own. So an enqueue costs one statement, not two.

    A mark is a hint, never a promise: one that is lost (the process ends first, the
    database is down) leaves its row to the relay, which publishes it again, and the
    consumers' claim makes the duplicate harmless. The delay is far below the age at
    which the relay takes a row (``outbox.relay_min_age_s``)."""

    def __init__(self, pool: asyncpg.Pool, delay_s: float = 0.25) -> None:
        super().__init__(pool)
        self._delay_s = delay_s
        self._pending: list[tuple[Any, datetime]] = []
        self._timer: asyncio.TimerHandle | None = None
        self._flushing: set[asyncio.Task[None]] = set()

    async def mark_published(self, ids: Sequence[Any], at: datetime) -> None:
        self._pending.extend((row_id, at) for row_id in ids)
        if self._timer is None and self._pending:
            self._timer = asyncio.get_running_loop().call_later(self._delay_s, self._flush_soon)

    def take(self) -> list[tuple[Any, datetime]]:
        """The marks waiting, for a statement that carries them. Nothing waits any more:
        the next mark's wait starts afresh (a timer left running would send the marks
        made just before it fires on their own, however soon a statement came)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        pending, self._pending = self._pending, []
        return pending

    def give_back(self, marks: Sequence[tuple[Any, datetime]]) -> None:
        """Marks whose statement failed: they wait for the next one."""
        if marks:
            self._pending.extend(marks)
            if self._timer is None:
                loop = asyncio.get_running_loop()
                self._timer = loop.call_later(self._delay_s, self._flush_soon)

    def _flush_soon(self) -> None:
        self._timer = None
        marks = self.take()
        if marks:
            task = asyncio.ensure_future(self._flush(marks))
            self._flushing.add(task)
            task.add_done_callback(self._flushing.discard)

    async def _flush(self, marks: Sequence[tuple[Any, datetime]]) -> None:
        try:
            await self._execute(MARK_PUBLISHED, [i for i, _ in marks], [at for _, at in marks])
        except Exception as exc:  # noqa: BLE001 - the relay publishes these rows again
            log.warning("could not mark %d outbox rows published: %s", len(marks), exc)

    async def close(self) -> None:
        """Write the marks still waiting (at shutdown, before the pool closes)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        marks = self.take()
        if marks:
            await self._flush(marks)
        if self._flushing:
            await asyncio.gather(*self._flushing, return_exceptions=True)
