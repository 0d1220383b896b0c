"""The worker's job store, with the ends of batch and chain members counted.

`FlowRecordingStore` wraps the store the runner records outcomes through. An outcome
that ends a member of a batch or chain is written in one transaction with what it
does to the flow (jobrail.jobs.workflows ``Workflows.job_ended``): the flow's
row locked first, then the member's end (fenced by its claim, as every record is),
the counts, and the callbacks or next step it releases or stops. Every other outcome
goes to the wrapped store's one-statement path unchanged.

The members' ends recorded in the same loop turn share one transaction (as the plain
path's records share one statement): the flows' rows are locked once, in the order of
their ids, and each end is counted in turn. A batch's members end one transaction at
a time (the flow's row is the lock), so this is what lets many workers' slots record
a batch at the speed of its jobs rather than one end per round trip.
"""

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from jobrail.jobs.domain import FlowRole, Job
from jobrail.jobs.flow import Flow, FlowId
from jobrail.jobs.messages import Outgoing
from jobrail.jobs.ports import ClaimToken, JobsUnitOfWork
from jobrail.jobs.progress import JobProgress
from jobrail.jobs.workflows import Workflows
from jobrail.kernel.batching import Coalescer
from jobrail.kernel.ids import JobId
from jobrail.worker.job_store import ClaimResult, JobIdentity, JobStore, WaitNote


@dataclass(frozen=True, slots=True)
class _End:
    job: Job
    claim: ClaimToken
    outbox: tuple[Outgoing, ...]

    @property
    def flow_id(self) -> FlowId:
        assert self.job.flow is not None
        return self.job.flow.flow_id


class FlowRecordingStore:
    def __init__(
        self, store: JobStore, units: Callable[[], JobsUnitOfWork], workflows: Workflows
    ) -> None:
        self._store = store
        self._units = units
        self._workflows = workflows
        self._ends: Coalescer[_End, bool] = Coalescer(self._record_ends)

    async def record(self, job: Job, claim: ClaimToken, outbox: Sequence[Outgoing]) -> bool:
        link = job.flow
        if link is None or link.role is not FlowRole.MEMBER or not job.status.is_terminal:
            return await self._store.record(job, claim, outbox)
        return await self._ends.submit(_End(job, claim, tuple(outbox)))

    async def _record_ends(self, ends: Sequence["_End"]) -> list[bool]:
        written: list[bool] = []
        async with self._units() as uow:
            locked: dict[FlowId, Flow | None] = {}
            for flow_id in sorted({end.flow_id for end in ends}):
                locked[flow_id] = await self._workflows.lock(uow, flow_id)
            saved = await uow.jobs.save_held_many([(end.job, end.claim) for end in ends])
            for end, held in zip(ends, saved, strict=True):
                if not held:
                    written.append(False)  # another worker took it over
                    continue
                for message in end.outbox:
                    # The runner publishes the outcome's messages once this returns.
                    await uow.outbox.add(message, dispatch=False)
                flow = locked[end.flow_id]
                if flow is not None:
                    await self._workflows.job_ended(uow, flow, end.job)
                written.append(True)
            for flow in locked.values():
                if flow is not None:
                    await uow.flows.save(flow)  # once, with every end of this turn
            await uow.commit()
        return written

    async def get(self, job_id: JobId) -> Job | None:
        return await self._store.get(job_id)

    async def claim(
        self, job_id: JobId, now: datetime, lease: timedelta, expect: JobIdentity | None = None
    ) -> ClaimResult:
        return await self._store.claim(job_id, now, lease, expect)

    async def extend_lease(self, job_id: JobId, claim: ClaimToken, until: datetime) -> bool:
        return await self._store.extend_lease(job_id, claim, until)

    async def expire(self, job_id: JobId, now: datetime) -> Job | None:
        return await self._store.expire(job_id, now)

    async def cancel_requested(self, job_id: JobId) -> bool:
        return await self._store.cancel_requested(job_id)

    async def note_waits(self, notes: Sequence[WaitNote]) -> None:
        await self._store.note_waits(notes)

    async def write_progress(self, job_id: JobId, claim: ClaimToken, progress: JobProgress) -> bool:
        return await self._store.write_progress(job_id, claim, progress)

    async def flow_members(self, flow_id: FlowId) -> list[Job]:
        return await self._store.flow_members(flow_id)
