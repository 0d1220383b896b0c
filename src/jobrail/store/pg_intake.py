"""The API's side of the hot paths on Postgres: a job and its message added in one
statement (``ENQUEUE`` in ``store/pg_queries.py``), the adds of one loop turn sharing it,
and the outbox rows' published marks, which ride along with the next of those
statements.
"""

import asyncio
import logging
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import asyncpg

from jobrail.jobs.domain import Job
from jobrail.kernel.batching import Coalescer
from jobrail.kernel.errors import ConflictError, InvalidInputError, QueuedCapError
from jobrail.store import json_codec
from jobrail.store.debounce import refused_by_cap
from jobrail.store.mapping import job_from_row, job_row
from jobrail.store.pg_pool import _Pg
from jobrail.store.pg_queries import (
    BY_KEY,
    BY_UNIQUE,
    DEBOUNCE,
    ENQUEUE,
    FLOW_BY_KEY,
    MARK_PUBLISHED,
    QUEUED_CAP,
)
from jobrail.store.queries import ENQUEUED
from jobrail.transport.codec import Envelope

log = logging.getLogger("jobrail.outbox")

# An enqueue whose unique key's active job ended while it looked tries this often.
_UNIQUE_TRIES = 3


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
    def of(cls, job: Job, envelope: Envelope) -> "_Intake":
        return cls(
            job,
            envelope,
            json_codec.dumps(job.payload),
            None if job.result is None else json_codec.dumps(job.result),
            json_codec.dumps(job.trace_context),
            json_codec.dumps(dict(envelope.headers)),
        )


class PgJobIntake(_Pg):
    """Adds a job and its encoded message in one statement (the store under
    ``outbox.committing.RecordingIntake``). Adds made in the
    same loop turn (or window) share that statement ("group commit"); each caller
    still gets its own answer: its job, the job an earlier request made with its key,
    a conflict, or its own refusal."""

    def __init__(
        self,
        pool: asyncpg.Pool,
        window_s: float = 0.0,
        marks: "PgOutboxMarks | None" = None,
    ) -> None:
        super().__init__(pool)
        self._adds: Coalescer[_Intake, bool] = Coalescer(self._add_many, window_s)
        self._marks = marks

    async def add(self, job: Job, envelope: Envelope) -> Job:
        intake = _Intake.of(job, envelope)
        if job.debounce_key is not None:
            return await self._debounce(intake)
        for _ in range(_UNIQUE_TRIES):
            if await self._adds.submit(intake):
                return job
            existing = await self._existing(job)
            if existing is not None:
                return existing
            if job.capped:
                cap, under = await self._fetchrow(QUEUED_CAP, job.tenant_id)
                if cap is not None and not under:
                    raise QueuedCapError(job.tenant_id, cap)
            if job.unique_key is None:
                break
            # The active job that held the unique key ended meanwhile: try again.
        raise ConflictError("a job with this key is being created; try again")

    async def _debounce(self, add: _Intake) -> Job:
        """The job added, or the pending job of its debounce key, which took its payload
        (store/debounce.py). Its own statement: never shared with other adds."""
        job, m = add.job, add.message
        values = job_row(job)
        row = await self._fetchrow(
            DEBOUNCE,
            *(values[name] for name in ENQUEUED),
            job.tenant_id if job.capped else None,
            m.id,
            m.queue,
            m.body,
            dict(m.headers),
            m.not_before,
            job.created_at,
        )
        if row is None:  # only the cap leaves a debounced add out
            refused_by_cap(job.tenant_id, (await self._fetchrow(QUEUED_CAP, job.tenant_id))[0])
        return job_from_row(row)

    async def _existing(self, job: Job) -> Job | None:
        """The job that kept `job` out: its idempotency key's, or the active job of its
        unique key. ConflictError if its idempotency key started a batch or chain."""
        if job.idempotency_key is not None:
            existing = await self._fetchrow(BY_KEY, job.tenant_id, job.idempotency_key)
            if existing is not None:
                return job_from_row(existing)
            flow = await self._fetchrow(FLOW_BY_KEY, job.tenant_id, job.idempotency_key)
            if flow is not None:
                raise ConflictError(
                    f"Idempotency-Key {job.idempotency_key!r} was already used for a {flow['kind']}"
                )
        if job.unique_key is not None:
            active = await self._fetchrow(BY_UNIQUE, job.tenant_id, job.type, job.unique_key)
            if active is not None:
                return job_from_row(active)
        return None

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
        added = {row["id"]: row["held_since"] for row in rows}
        for job in jobs_:
            if job.id in added:  # released at once, if its queue's gate was open
                job.held_since = added[job.id]
        return [job.id in added for job in jobs_]

    @staticmethod
    def _arguments(
        adds: Sequence[_Intake],
        jobs_: Sequence[Job],
        messages: Sequence[Envelope],
        marks: Sequence[tuple[Any, datetime]],
    ) -> list[Any]:
        # The jobs due now it would hold, numbered per queue: the first ones go out at
        # once if their queue's fast-path credit has room (store/enqueue_statement.py).
        wants: Counter[str] = Counter()
        ranks: list[int | None] = []
        for job in jobs_:
            if job.held_since is None or not job.is_due(job.created_at):
                ranks.append(None)
            else:
                wants[job.queue] += 1
                ranks.append(wants[job.queue])
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
            [job.deadline for job in jobs_],
            [job.unique_key for job in jobs_],
            [job.debounce_key for job in jobs_],
            [job.held_since for job in jobs_],
            [job.rank_at for job in jobs_],
            [int(job.priority) for job in jobs_],
            [job.fair_key for job in jobs_],
            [job.tenant_id if job.capped else None for job in jobs_],
            ranks,
            [job.id for job in jobs_],
            [m.id for m in messages],
            [m.queue for m in messages],
            [m.body for m in messages],
            [add.headers for add in adds],
            [m.not_before for m in messages],
            [job.created_at for job in jobs_],
            [row_id for row_id, _ in marks],
            [at for _, at in marks],
            list(wants),
            list(wants.values()),
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
