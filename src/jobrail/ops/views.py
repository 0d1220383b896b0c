"""What the ops page shows of batches and chains and of one job: every tenant's, for
operators (the overview is jobrail.ops.overview)."""

import uuid
from dataclasses import dataclass, field
from datetime import datetime

from jobrail.events.feed import EventFilter, JobEventLog, StoryLine
from jobrail.jobs.domain import FlowRole, Job, JobStatus
from jobrail.jobs.flow import Flow, FlowCounts, FlowId
from jobrail.jobs.listing import MAX_PAGE_SIZE
from jobrail.jobs.operator_reads import OpsReadModel
from jobrail.jobs.ports import Cursor, JobFilter, JobPage, JobsUnitOfWork
from jobrail.jobs.workflows import FlowView
from jobrail.kernel.errors import InvalidInputError, NotFoundError
from jobrail.kernel.ids import JobId, TenantId
from jobrail.worker.failures import AttemptFailure, AttemptFailures


@dataclass(frozen=True, slots=True)
class OpsFlow:
    view: FlowView
    callbacks: dict[FlowRole, Job]
    """The callback jobs there are, by role."""
    members: list[Job]
    """Its first members, in their order (a chain's steps in order)."""


@dataclass(frozen=True, slots=True)
class OpsJob:
    job: Job
    flow: Flow | None
    """Its batch or chain; None when it has none (or the flow's row is gone)."""
    events: list[StoryLine]
    """The first lines of its story (its events, progress folded), in feed order."""
    more_events: bool
    """Whether its story goes on after these."""
    failures: list[AttemptFailure] = field(default_factory=list)
    """Its failed attempts' errors and tracebacks, in the order they failed."""


class ListOpsFlows:
    """The most recent batches and chains of every tenant, the newest first, each with
    its counts as `GET /batches/{id}` derives them (its members by state, now)."""

    def __init__(self, reads: OpsReadModel) -> None:
        self._reads = reads

    async def __call__(self, limit: int = 20) -> list[FlowView]:
        return [
            FlowView(flow, FlowCounts.of(by_status))
            for flow, by_status in await self._reads.recent_flows(limit)
        ]


class GetOpsFlow:
    """A batch or chain of any tenant: its counts (as `GET /batches/{id}` has them), its
    callbacks and its first `members` members, in their order."""

    def __init__(self, uow: JobsUnitOfWork) -> None:
        self._uow = uow

    async def __call__(self, flow_id: FlowId, members: int = 100) -> OpsFlow:
        async with self._uow:
            flow = await self._uow.flows.get(flow_id)
            if flow is None:
                raise NotFoundError(f"batch or chain {flow_id} not found")
            counts = FlowCounts.of(await self._uow.flows.counts(flow_id))
            callbacks = {
                role: job
                for role, job_id in flow.callbacks.items()
                if (job := await self._uow.jobs.get(JobId(job_id))) is not None
            }
            shown = await self._uow.flows.jobs(flow_id, roles=[FlowRole.MEMBER], limit=members)
        return OpsFlow(FlowView(flow, counts), callbacks, shown)


class GetOpsJob:
    """A job of any tenant, with its batch or chain when it has one and the first
    `events` lines of its story (jobrail.events.feed.StoryLine; fewer once retention pruned
    its events): the lines `GET /jobs/{id}/events` answers, so that both views of a job
    agree, and its lifecycle stays in view however often it reports progress. Every
    event written is read, those the feed holds back yet too: this is a look, not a
    page to read on from. With `failures`, its first `events` failed attempts' errors
    and tracebacks too."""

    def __init__(
        self, uow: JobsUnitOfWork, events: JobEventLog, failures: AttemptFailures | None = None
    ) -> None:
        self._uow = uow
        self._events = events
        self._failures = failures

    async def __call__(self, job_id: JobId, events: int = 100) -> OpsJob:
        async with self._uow:
            job = await self._uow.jobs.get(job_id)
            if job is None:
                raise NotFoundError(f"job {job_id} not found")
            flow = await self._uow.flows.get(job.flow.flow_id) if job.flow else None
        which = EventFilter(None, job_id=job_id)
        found = list(await self._events.story(which, events + 1, held_back_too=True))
        failed = await self._failures.of_job(job_id, events) if self._failures else []
        return OpsJob(job, flow, found[:events], more_events=len(found) > events, failures=failed)


@dataclass(frozen=True, slots=True)
class ListOpsJobsQuery:
    tenant_id: TenantId | None = None
    status: JobStatus | None = None
    type: str | None = None
    queue: str | None = None
    limit: int = 50
    created_before: datetime | None = None
    after: Cursor | None = None
    """Where the previous page ended (its `next_cursor`)."""


class ListOpsJobs:
    """Jobs of every tenant (or of one), newest first, filtered by status, type and
    queue, created before a time if given, after a page's cursor if given; at most 200 a
    page, as `ListJobs` pages."""

    def __init__(self, uow: JobsUnitOfWork) -> None:
        self._uow = uow

    async def __call__(self, query: ListOpsJobsQuery) -> JobPage:
        if not 1 <= query.limit <= MAX_PAGE_SIZE:
            raise InvalidInputError(f"limit must be between 1 and {MAX_PAGE_SIZE}")
        where = JobFilter(query.tenant_id, query.status, query.type, queue=query.queue)
        # Before a time is after a cursor at that time and the smallest id; with a
        # page's cursor too, the list starts after whichever comes later in it.
        starts = [query.after] if query.after else []
        if query.created_before is not None:
            starts.append(Cursor(query.created_before, JobId(uuid.UUID(int=0))))
        after = min(starts, key=lambda c: (c.created_at, c.job_id.int), default=None)
        async with self._uow:
            return await self._uow.jobs.list(where, query.limit, after)
