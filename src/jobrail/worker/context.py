"""What a job handler sees of the job it runs."""

import asyncio
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Any, TypeVar

from jobrail.jobs.domain import FlowLink, FlowRole, JobStatus
from jobrail.jobs.progress import check_progress
from jobrail.kernel.ids import JobId, TenantId
from jobrail.worker.job_store import JobStore
from jobrail.worker.progress import ProgressReporter
from jobrail.worker.watchdog import JobCancelledError

__all__ = ["JobCancelledError", "JobContext"]

T = TypeVar("T")


@dataclass(slots=True)
class JobContext:
    job_id: JobId
    job_type: str
    tenant_id: TenantId
    attempt: int
    max_attempts: int
    _store: JobStore
    fence: int | None = None
    """The fencing token of the job's lock, if it declares one. Pass it to writes that
    the lock protects, so that a write from a holder that lost the lock is refused."""
    _progress: ProgressReporter | None = None
    flow: FlowLink | None = None
    """The batch or chain the job belongs to (its id, the job's role and step), if any."""

    async def checkpoint(self) -> None:
        """Stop here if cancel was requested. Long handlers call this between steps."""
        if await self._store.cancel_requested(self.job_id):
            raise JobCancelledError(f"job {self.job_id} was cancelled")

    async def shielded(self, step: Awaitable[T]) -> T:
        """Run `step` to its end even if the job is stopped meanwhile (cancelled, timed
        out, its lease or lock lost): the stop takes effect once `step` has returned,
        and the handler goes no further than that. For a write and its record that must
        not be parted; keep it short, since the job's lease and lock are not given up
        until it ends. (``asyncio.shield`` alone would let the job end while `step`
        still runs.)"""
        running = asyncio.ensure_future(step)
        try:
            return await asyncio.shield(running)
        except asyncio.CancelledError:
            await asyncio.wait([running])
            raise

    async def progress(
        self, current: float, total: float | None = None, message: str | None = None
    ) -> None:
        """Say how far the job has got: `current` of `total` (None: not known), and a
        short message (at most 200 characters). Raises ValueError for a negative or
        non-finite number, `current` above `total`, or a message too long or with a NUL.

        Call it as often as you like: reports are coalesced into a few writes a second
        (JOBRAIL_JOBS__PROGRESS_INTERVAL_MS), the latest written before the outcome, so
        a finished job shows its final progress. It never waits for the database, and a
        write that fails is dropped, never the job's failure."""
        if self._progress is None:
            # A context made by hand (a handler called directly, in a test): the
            # report is checked, and kept nowhere.
            check_progress(current, total, message)
            return
        self._progress.report(current, total, message)

    async def flow_results(self) -> list[dict[str, Any] | None]:
        """The results of the members of the job's batch or chain, in the order they were
        made (None for a member that did not succeed): what a batch's callback reads."""
        if self.flow is None:
            raise RuntimeError(f"job {self.job_id} belongs to no batch or chain")
        members = await self._store.flow_members(self.flow.flow_id)
        return [m.result if m.status is JobStatus.SUCCEEDED else None for m in members]

    async def previous_result(self) -> dict[str, Any] | None:
        """The result of the chain's step before this one (None for the first step)."""
        if self.flow is None or self.flow.role is not FlowRole.MEMBER or self.flow.step is None:
            raise RuntimeError(f"job {self.job_id} is no step of a chain")
        if self.flow.step == 0:
            return None
        members = await self._store.flow_members(self.flow.flow_id)
        before = [m for m in members if m.flow and m.flow.step == self.flow.step - 1]
        return before[0].result if before else None
