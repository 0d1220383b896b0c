"""An attempt's progress reports, coalesced into a few fenced writes.

A handler may report progress as often as it likes (``ctx.progress`` in a tight loop):
the first report is written at once, then at most one write per interval carries the
latest report, and `close` writes the last one before the attempt's outcome is
recorded. Every write is fenced by the attempt's claim, so an attempt that lost its
lease writes nothing. Progress is advisory: a write that fails is logged and dropped,
never the job's failure; the next report (or the closing write) carries on.
"""

import asyncio
import logging
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta

from jobrail.jobs.ports import ClaimToken
from jobrail.jobs.progress import JobProgress, check_progress
from jobrail.kernel.clock import Clock
from jobrail.kernel.ids import JobId
from jobrail.worker.job_store import JobStore

log = logging.getLogger("jobrail.progress")

_Report = tuple[float, float | None, str | None, datetime]


class ProgressReporter:
    def __init__(
        self,
        store: JobStore,
        job_id: JobId,
        claim: ClaimToken,
        clock: Clock,
        interval: timedelta,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self._store = store
        self._job_id = job_id
        self._claim = claim
        self._clock = clock
        self._interval_s = interval.total_seconds()
        self._sleep = sleep
        self._latest: _Report | None = None
        self._written: _Report | None = None
        """The latest report whose write has ended (landed, or failed and dropped)."""
        self._writer: asyncio.Task[None] | None = None
        self._waiting = False
        self._fenced_out = False
        self._closed = False

    def report(
        self, current: float, total: float | None = None, message: str | None = None
    ) -> None:
        """Take a report (ValueError if it is not one, see JobProgress); it is written
        now if nothing was written this interval, else at the interval's end."""
        check_progress(current, total, message)
        if self._closed or self._fenced_out:
            return
        # Made into a JobProgress only when written: a tight loop reports far more often.
        self._latest = (current, total, message, self._clock.now())
        if self._writer is None:
            self._writer = asyncio.create_task(self._write_pending())

    async def close(self) -> None:
        """Write the latest report if it is not written yet; later reports are ignored.
        Returns once no write of this attempt's is under way."""
        self._closed = True
        writer = self._writer
        if writer is not None:
            if self._waiting:
                writer.cancel()  # only its wait: the latest report is written below
            await asyncio.wait([writer])
        if self._latest is not self._written:
            await self._write(self._latest)

    async def _write_pending(self) -> None:
        try:
            while self._latest is not self._written and not self._fenced_out:
                await self._write(self._latest)
                if self._closed:
                    return
                self._waiting = True
                try:
                    await self._sleep(self._interval_s)
                finally:
                    self._waiting = False
        finally:
            self._writer = None

    async def _write(self, report: "_Report | None") -> None:
        if report is None or self._fenced_out:
            return
        progress = JobProgress(*report)
        try:
            landed = await self._store.write_progress(self._job_id, self._claim, progress)
        except Exception as exc:  # noqa: BLE001 - progress never fails the job
            log.warning("job %s: its progress was not written (%s); dropped", self._job_id, exc)
            return
        finally:
            self._written = report
        if not landed:
            # Another attempt holds the job, or it ended: nothing more of ours lands.
            self._fenced_out = True
            log.info("job %s: progress of a claim it no longer holds was not written", self._job_id)
