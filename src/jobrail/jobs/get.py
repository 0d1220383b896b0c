import uuid
from dataclasses import dataclass, replace

from jobrail.jobs.domain import CLAIMABLE_STATUSES, Job, WaitsOn
from jobrail.jobs.ports import JobsUnitOfWork, LinePlaces, PauseReader
from jobrail.jobs.standing import Standing, standing_of
from jobrail.kernel.clock import Clock
from jobrail.kernel.errors import NotFoundError
from jobrail.kernel.ids import JobId, TenantId


@dataclass(frozen=True, slots=True)
class GetJobQuery:
    tenant_id: TenantId
    job_id: JobId


class GetJob:
    """A job of the asking tenant. Another tenant's job is reported as not found."""

    def __init__(
        self, uow: JobsUnitOfWork, pauses: PauseReader, places: LinePlaces, clock: Clock
    ) -> None:
        self._uow = uow
        self._pauses = pauses
        self._places = places
        self._clock = clock

    async def __call__(self, query: GetJobQuery) -> Job:
        async with self._uow:
            job = await self._uow.jobs.get(query.job_id, query.tenant_id)
        if job is None:
            raise NotFoundError(f"job {query.job_id} not found")
        return job

    async def standing_of(self, job: Job) -> Standing | None:
        """Where `job` stands if it waits to start (jobrail.jobs.standing): why it waits
        (a pause of its queue, type or tenant among the reasons), its place in its
        tenant's line if it is held there, and when it may start. A read of the pauses,
        one of its line if it is held, and one of the job holding its lock if any."""
        if job.status not in CLAIMABLE_STATUSES:
            return None
        pause = await self._pauses.pause_of(job)
        place = await self._places.place_of(job) if job.is_held else None
        standing = standing_of(job, self._clock.now(), pause, place)
        if standing is None or not any(w.held_by for w in standing.on):
            return standing
        return replace(standing, on=tuple([await self._told(w, job) for w in standing.on]))

    async def _told(self, waits: WaitsOn, job: Job) -> WaitsOn:
        """The lock's holder, as the tenant may be told it: only a job of its own (a lock
        key may be shared between tenants, whose jobs are none of its business)."""
        if waits.held_by is None:
            return waits
        try:
            holder = JobId(uuid.UUID(waits.held_by))
        except ValueError:
            return replace(waits, held_by=None)
        async with self._uow:
            found = await self._uow.jobs.get(holder, job.tenant_id)
        return waits if found is not None else replace(waits, held_by=None)
