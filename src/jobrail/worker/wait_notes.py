"""What deferred jobs wait for, written to their rows in batches.

A job the limits turn away is sent round again without a write to its row; what it waits
for (``jobrail.jobs.domain.Wait``) is only for people to read (``GET /jobs/{id}``), so
the notes of every deferral in an interval are written together, in one statement, and
the latest note of a job replaces its earlier ones. A note is advice: a store error drops
it (the next deferral notes again), and a job that started meanwhile keeps none (see
``JobStore.note_waits``).
"""

import asyncio
import logging
from datetime import datetime

from jobrail.jobs.domain import Wait
from jobrail.kernel.ids import JobId
from jobrail.worker.job_store import JobStore, WaitNote

log = logging.getLogger("jobrail.runner")


class WaitNotes:
    def __init__(self, store: JobStore, interval_s: float = 0.2) -> None:
        self._store = store
        self._interval_s = interval_s
        self._notes: dict[JobId, WaitNote] = {}
        self._flushing: asyncio.Task[None] | None = None
        self._sleeping = False
        self.written = 0
        """Statements written so far (for tests and the bench)."""

    def note(self, job_id: JobId, wait: Wait, at: datetime) -> None:
        """Note what `job_id` waits for, as of `at`; written within the interval."""
        self._notes[job_id] = WaitNote(job_id, wait, at)
        if self._flushing is None:
            self._flushing = asyncio.create_task(self._flush_later(), name="wait-notes")

    async def _flush_later(self) -> None:
        self._sleeping = True
        try:
            await asyncio.sleep(self._interval_s)
        finally:
            self._sleeping = False
            self._flushing = None
            await self.flush()

    async def close(self) -> None:
        """Write the notes taken so far now (at shutdown); returns once no write is under
        way, so none is left to run after the store has closed its connections."""
        flushing = self._flushing
        if flushing is not None:
            if self._sleeping:
                flushing.cancel()  # only its wait: it writes the notes as it ends
            await asyncio.wait([flushing])
        await self.flush()

    async def flush(self) -> None:
        """Write the notes taken so far (at shutdown, or in a test)."""
        notes, self._notes = list(self._notes.values()), {}
        if not notes:
            return
        try:
            await self._store.note_waits(notes)
            self.written += 1
        except Exception as exc:  # noqa: BLE001 - advice only: dropped, noted again next time
            log.warning("%d wait notes dropped: %s", len(notes), exc)
