"""The jobs' HTTP schemas: a job as the API shows it, its list and its events page, an
enqueue's request (``POST /jobs``) and its 202, and the list's cursor and filter."""

import base64
import binascii
import uuid
from datetime import UTC, datetime
from typing import Annotated, Any, Literal, NamedTuple

from fastapi import Depends, Query, Request, Response
from pydantic import BaseModel, Field

from jobrail.jobs.domain import Job, JobStatus
from jobrail.jobs.enqueue import EnqueueResult
from jobrail.jobs.flow import FlowCounts
from jobrail.jobs.listing import ListJobs, ListJobsQuery
from jobrail.jobs.options import EnqueueOptions
from jobrail.jobs.ports import Cursor
from jobrail.jobs.registry import MAX_NAME_LENGTH
from jobrail.jobs.standing import Standing
from jobrail.jobs.waiting_out import PausedByOut, WaitingOut
from jobrail.jobs.workflows import FlowView
from jobrail.kernel.errors import InvalidInputError
from jobrail.kernel.ids import JobId, TenantId

JobStatusName = Literal[
    "pending", "running", "retrying", "succeeded", "failed", "cancelled", "blocked", "expired"
]


class JobRequest(EnqueueOptions):
    """A job a tenant enqueues by its type's name (``POST /jobs``), with its options."""

    type: str = Field(
        min_length=1,
        max_length=MAX_NAME_LENGTH,
        description="A job type its module opened to tenants (such as `demo.echo`).",
    )
    payload: dict[str, Any] = Field(description="The job's payload, as its type takes it.")
    entity_id: str | None = Field(
        default=None,
        min_length=1,
        max_length=255,
        description="What the job is about, to list its jobs by (`GET /jobs?entity_id=`).",
    )


class JobAccepted(BaseModel):
    job_id: uuid.UUID
    status: JobStatusName
    created: bool = Field(
        default=True,
        description="False when the enqueue made no new job: its Idempotency-Key's job, "
        "the active job of its unique_key, or the pending job its debounce_key joined.",
    )


class ProgressOut(BaseModel):
    current: int | float
    total: int | float | None = Field(description="null when the job does not know it.")
    message: str | None
    updated_at: datetime = Field(description="When the running attempt reported it.")


class FlowCountsOut(BaseModel):
    total: int
    pending: int = Field(
        description="Waiting to run: pending, retrying, or a chain's later steps not released yet."
    )
    running: int
    succeeded: int
    failed: int
    cancelled: int

    @classmethod
    def of(cls, counts: FlowCounts) -> "FlowCountsOut":
        return cls(
            total=counts.total,
            pending=counts.pending,
            running=counts.running,
            succeeded=counts.succeeded,
            failed=counts.failed,
            cancelled=counts.cancelled,
        )


class FlowOut(BaseModel):
    id: uuid.UUID
    kind: Literal["batch", "chain"]
    name: str | None
    status: Literal["running", "succeeded", "failed", "cancelled"] = Field(
        description="running until every member has ended; then succeeded (all did), "
        "failed (one or more failed) or cancelled."
    )
    cancel_requested: bool
    counts: FlowCountsOut = Field(description="Its members by state, as they are now.")
    callbacks: dict[Literal["then", "catch", "finally"], uuid.UUID] = Field(
        description="The callback jobs: blocked until released, cancelled if never due."
    )
    created_at: datetime
    finished_at: datetime | None

    @classmethod
    def of(cls, view: FlowView) -> "FlowOut":
        flow = view.flow
        return cls(
            id=flow.id,
            kind=flow.kind.value,
            name=flow.name,
            status=flow.status.value,
            cancel_requested=flow.cancel_requested,
            counts=FlowCountsOut.of(view.counts),
            callbacks={role.value: job_id for role, job_id in flow.callbacks.items()},
            created_at=flow.created_at,
            finished_at=flow.finished_at,
        )


class JobFlowOut(BaseModel):
    id: uuid.UUID = Field(description="The batch's or chain's id.")
    kind: Literal["batch", "chain"] | None = Field(description="null in lists.")
    role: Literal["member", "then", "catch", "finally"]
    step: int | None = Field(description="A member's place (0 first).")
    status: Literal["running", "succeeded", "failed", "cancelled"] | None = None
    counts: FlowCountsOut | None = Field(
        default=None, description="Its members by state (on `GET /jobs/{id}`; null in lists)."
    )


class JobOut(BaseModel):
    id: uuid.UUID
    type: str
    queue: str
    status: JobStatusName
    attempts: int
    max_attempts: int
    entity_id: str | None
    last_error: str | None
    result: dict[str, Any] | None
    cancel_requested: bool
    created_at: datetime
    updated_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    run_after: datetime | None = Field(
        description="When the job may start: its `run_at` or `delay`, or when a retrying "
        "job's next attempt is due."
    )
    deadline: datetime | None = Field(
        default=None,
        description="No attempt starts at or after it: a job still waiting then ends expired.",
    )
    unique_key: str | None = Field(
        default=None,
        description="While this job is pending, retrying or running, an enqueue of its type "
        "with this key returns it instead of making a new one.",
    )
    priority: Literal["low", "normal", "high", "urgent"] = Field(
        default="normal",
        description="Its place among the tenant's jobs under fair dispatch.",
    )
    waiting: WaitingOut | None = Field(
        default=None,
        description="A job that waits to start: why, since and until when, and under fair "
        "dispatch its place in its tenant's line and when it may start (on `GET "
        "/jobs/{id}`; in lists, only what its limits noted). null once it runs, and "
        "while it is with the workers.",
    )
    paused: PausedByOut | None = Field(
        default=None,
        description="A waiting job whose queue, type or tenant an operator paused: it "
        "starts once that is resumed (on `GET /jobs/{id}`).",
    )
    progress: ProgressOut | None = Field(
        default=None,
        description="The latest progress its handler reported (`ctx.progress`), or null: "
        "written a few times a second while it runs, and last before its outcome.",
    )
    flow: JobFlowOut | None = Field(
        default=None, description="The batch or chain the job belongs to, if any."
    )

    @classmethod
    def of(
        cls, job: Job, flow: FlowView | None = None, standing: Standing | None = None
    ) -> "JobOut":
        """The job; with its `standing` (``GetJob.standing_of``), where it stands if it
        waits, else only what its limits noted."""
        return cls(
            id=job.id,
            type=job.type,
            queue=job.queue,
            status=job.status.value,
            attempts=job.attempts,
            max_attempts=job.max_attempts,
            entity_id=job.entity_id,
            last_error=job.last_error,
            result=job.result,
            cancel_requested=job.cancel_requested,
            created_at=job.created_at,
            updated_at=job.updated_at,
            started_at=job.started_at,
            finished_at=job.finished_at,
            run_after=job.run_after,
            deadline=job.deadline,
            unique_key=job.unique_key,
            priority=job.priority.label,
            paused=PausedByOut.of(standing.pause if standing else None),
            waiting=WaitingOut.of(standing) if standing else WaitingOut.noted(job.waiting),
            progress=None
            if job.progress is None
            else ProgressOut(
                current=job.progress.current,
                total=job.progress.total,
                message=job.progress.message,
                updated_at=job.progress.updated_at,
            ),
            flow=_job_flow(job, flow),
        )


def _job_flow(job: Job, view: FlowView | None) -> JobFlowOut | None:
    if job.flow is None:
        return None
    return JobFlowOut(
        id=job.flow.flow_id,
        kind=view.flow.kind.value if view else None,
        role=job.flow.role.value,
        step=job.flow.step,
        status=view.flow.status.value if view else None,
        counts=FlowCountsOut.of(view.counts) if view else None,
    )


class JobEventOut(BaseModel):
    """One event of the job event feed (jobrail.events.feed)."""

    id: str = Field(
        description="The event's place in the feed: give it as Last-Event-ID (or `after`) "
        "to read what came after it."
    )
    event: str = Field(
        description="enqueued, started, progress, deferred, retrying, succeeded, failed, "
        "cancelled, released (a batch or chain released the job) or redriven. A job whose "
        "worker was lost shows its next attempt's started."
    )
    job_id: uuid.UUID
    job_type: str
    at: datetime
    status: JobStatusName = Field(description="The job's status after the change.")
    attempts: int
    last_error: str | None
    run_after: datetime | None
    progress: ProgressOut | None
    waiting: WaitingOut | None = Field(description="What a deferred job waits for.")
    flow_id: uuid.UUID | None = Field(description="Its batch or chain.")


class JobEventPage(BaseModel):
    items: list[JobEventOut]
    last_event_id: str | None = Field(
        description="The last item's id (null if none): ask again with after=<it> for more."
    )


class JobList(BaseModel):
    items: list[JobOut]
    next_cursor: str | None = Field(description="Pass as `cursor` to get the next page.")


def job_location(request: Request, job_id: JobId, jobs: str = "/jobs") -> str:
    """Where a job's status is read: under the app's mount point (the ASGI root_path)
    when it is mounted in another app, at `jobs` (the path of the jobs routes)."""
    return f"{request.scope.get('root_path', '')}{jobs}/{job_id}"


def accepted(
    result: EnqueueResult, response: Response, request: Request, jobs: str = "/jobs"
) -> JobAccepted:
    """The 202 answer to an enqueue; a replayed Idempotency-Key says so in a header (a
    job found by its unique or debounce key is no replay: `created` says it)."""
    response.headers["Location"] = job_location(request, result.job.id, jobs)
    key = result.job.idempotency_key
    if not result.created and key is not None and key == request.headers.get("Idempotency-Key"):
        response.headers["Idempotent-Replayed"] = "true"
    return JobAccepted(job_id=result.job.id, status=result.job.status.value, created=result.created)


def encode_cursor(cursor: Cursor | None) -> str | None:
    if cursor is None:
        return None
    raw = f"{cursor.created_at.isoformat()}|{cursor.job_id}"
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


# A cursor names a job the API listed, so its time is one a job can have been created
# at: timezone-aware (the API writes UTC) and well inside what every backend and
# datetime arithmetic can hold. Year 1 or 9999 would overflow on the way to the
# database; a naive time would be refused there: both were 500s.
_CURSOR_YEARS = range(2000, 9000)


def decode_cursor(value: str | None) -> Cursor | None:
    if not value:
        return None
    try:
        raw = base64.urlsafe_b64decode(value + "=" * (-len(value) % 4)).decode()
        created, job_id = raw.split("|", 1)
        created_at = datetime.fromisoformat(created)
        if created_at.tzinfo is None or created_at.utcoffset() is None:
            raise ValueError("naive time")
        created_at = created_at.astimezone(UTC)
        if created_at.year not in _CURSOR_YEARS:
            raise ValueError("time out of range")
        return Cursor(created_at=created_at, job_id=JobId(uuid.UUID(job_id)))
    except (ValueError, OverflowError, binascii.Error, UnicodeDecodeError):
        raise InvalidInputError("cursor is not one this API gave out") from None


class JobFilter(NamedTuple):
    """The query of ``GET /jobs``: which jobs, how many, from where."""

    status: JobStatusName | None
    type: str | None
    entity_id: str | None
    limit: int
    cursor: str | None


def _job_filter(
    status: JobStatusName | None = None,
    type: Annotated[str | None, Query(max_length=128)] = None,
    entity_id: Annotated[str | None, Query(max_length=255)] = None,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
    cursor: Annotated[str | None, Query(max_length=200)] = None,
) -> JobFilter:
    return JobFilter(status, type, entity_id, limit, cursor)


JobFilterQuery = Annotated[JobFilter, Depends(_job_filter)]


async def jobs_page(list_jobs: ListJobs, tenant: TenantId, query: JobFilter) -> JobList:
    """A page of the tenant's jobs, newest first (``GET /jobs``, in the app and in
    ``JobRail.router``)."""
    page = await list_jobs(
        ListJobsQuery(
            tenant_id=tenant,
            status=JobStatus(query.status) if query.status else None,
            type=query.type,
            entity_id=query.entity_id,
            limit=query.limit,
            after=decode_cursor(query.cursor),
        )
    )
    return JobList(
        items=[JobOut.of(job) for job in page.items], next_cursor=encode_cursor(page.next_cursor)
    )
