"""Operator endpoints. Every route here needs an admin API key: those under ``/admin``, and
a job's redrive (``POST /jobs/{id}/redrive``), beside the jobs routes."""

import uuid
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from dishka.integrations.fastapi import FromDishka
from fastapi import APIRouter, Query
from pydantic import BaseModel, ConfigDict, Field, model_validator

from jobrail.http.auth import AdminPrincipal
from jobrail.http.errors import ADMIN_ERROR_RESPONSES, ERROR_RESPONSES
from jobrail.http.rate_limits import RateLimitEnqueue
from jobrail.http.schemas import RequestModel
from jobrail.jobs.api import JobsRoute
from jobrail.jobs.operator_reads import QueueStats
from jobrail.jobs.schemas import JobOut
from jobrail.kernel.ids import JobId
from jobrail.ops.admin_routes import admin_router
from jobrail.ops.dead_letters import (
    ListDeadLetters,
    PurgeDeadLetters,
    PurgeDeadLettersCommand,
    RedriveDeadLetters,
    RedriveDeadLettersCommand,
)
from jobrail.ops.limits import LimitsAdmin
from jobrail.ops.overview import GetOpsOverview
from jobrail.ops.redrive import RedriveJob, RedriveJobCommand

router = admin_router()

LimitKey = Annotated[
    str,
    Query(
        min_length=1,
        max_length=255,
        description="The limit's key as the job filled it in, e.g. `account:42`.",
    ),
]


class LimitStateOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    job_type: str
    limit: str
    kind: str
    key: str
    allowed: bool
    remaining: float
    retry_after_s: float


class LimitReset(BaseModel):
    job_type: str
    limit: str
    key: str
    reset: bool


@router.get("/limits/{job_type}/{limit}", summary="Peek at a job type's limit for one key")
async def peek_limit(
    job_type: str, limit: str, key: LimitKey, limits: FromDishka[LimitsAdmin]
) -> LimitStateOut:
    return LimitStateOut.model_validate(await limits.peek(job_type, limit, key))


@router.post(
    "/limits/{job_type}/{limit}/reset",
    summary="Clear a job type's limit for one key (frees a stuck lock)",
)
async def reset_limit(
    job_type: str, limit: str, key: LimitKey, limits: FromDishka[LimitsAdmin]
) -> LimitReset:
    await limits.reset(job_type, limit, key)
    return LimitReset(job_type=job_type, limit=limit, key=key, reset=True)


class LimitHolder(BaseModel):
    holder: str
    until: datetime


class LimitHolders(BaseModel):
    job_type: str
    limit: str
    key: str
    holders: list[LimitHolder]


@router.get(
    "/limits/{job_type}/{limit}/holders",
    summary="Who holds a job type's lock or concurrency slots for one key",
)
async def limit_holders(
    job_type: str, limit: str, key: LimitKey, limits: FromDishka[LimitsAdmin]
) -> LimitHolders:
    held = await limits.holders(job_type, limit, key)
    return LimitHolders(
        job_type=job_type,
        limit=limit,
        key=key,
        holders=[
            LimitHolder(
                holder=str(h["holder"]), until=datetime.fromtimestamp(h["until_ms"] / 1000, UTC)
            )
            for h in held
        ],
    )


class QueueOut(BaseModel):
    queue: str
    ready: int
    consumers: int


class QueueList(BaseModel):
    items: list[QueueOut]


@router.get("/queues", summary="Messages waiting and consumers, per queue (with the DLQ)")
async def queues(stats: FromDishka[QueueStats]) -> QueueList:
    depths = await stats.queue_depths()
    return QueueList(
        items=[QueueOut(queue=d.queue, ready=d.ready, consumers=d.consumers) for d in depths]
    )


class DeadLetterOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: str
    reason: str
    source_queue: str
    dead_at: str
    job_id: uuid.UUID | None
    job_type: str | None
    tenant_id: str | None
    preview: str = Field(description="The start of a message that is not a job message.")
    job_failed_at: datetime | None = Field(
        default=None, description="For a failed job's letter: when the job failed."
    )


class DeadLetterList(BaseModel):
    items: list[DeadLetterOut]


@router.get("/dlq", summary="Messages in the dead-letter queue, oldest first (left in place)")
async def dead_letters(
    list_dead_letters: FromDishka[ListDeadLetters],
    limit: Annotated[int, Query(ge=1, le=1000)] = 50,
) -> DeadLetterList:
    letters = await list_dead_letters(limit)
    return DeadLetterList(items=[DeadLetterOut.model_validate(letter) for letter in letters])


class RedriveIn(RequestModel):
    ids: list[Annotated[str, Field(min_length=1, max_length=100)]] | None = Field(
        default=None, max_length=1000, description="Dead letters to redrive, by id."
    )
    all: bool = Field(default=False, description="Redrive every dead letter whose job failed.")

    @model_validator(mode="after")
    def _one_of(self) -> "RedriveIn":
        if (self.ids is None) == (not self.all):
            raise ValueError("give either ids or all=true")
        return self


class RedriveOutcomeOut(BaseModel):
    id: str
    job_id: str | None
    outcome: Literal["redriven", "removed", "kept"]
    detail: str


class RedriveResult(BaseModel):
    redriven: int
    removed: int = Field(description="Stale letters of failures redriven or failed again since.")
    kept: int
    items: list[RedriveOutcomeOut]
    not_found: list[str] = Field(
        default_factory=list,
        description="Ids asked for that no dead letter looked at has (the oldest 1,000): "
        "redriven or purged already, or never one.",
    )


@router.post(
    "/dlq/redrive",
    summary="Run dead-lettered jobs again",
    description=RedriveDeadLetters.__doc__ or "",
)
async def redrive_dead_letters(
    body: RedriveIn, redrive: FromDishka[RedriveDeadLetters]
) -> RedriveResult:
    outcomes = await redrive(
        RedriveDeadLettersCommand(ids=frozenset(body.ids) if body.ids is not None else None)
    )
    return RedriveResult(
        redriven=sum(1 for o in outcomes if o.outcome == "redriven"),
        removed=sum(1 for o in outcomes if o.outcome == "removed"),
        kept=sum(1 for o in outcomes if o.outcome == "kept"),
        items=[
            RedriveOutcomeOut(id=o.id, job_id=o.job_id, outcome=o.outcome, detail=o.detail)
            for o in outcomes
        ],
        # An id that matched nothing answered as a redrive of nothing, without a word.
        not_found=sorted(set(body.ids) - {o.id for o in outcomes}) if body.ids else [],
    )


class PurgeIn(RequestModel):
    all: bool = Field(default=False, description="Purge every dead letter.")
    # Strict mode takes a UUID only as a UUID object; JSON has strings.
    job_id: uuid.UUID | None = Field(
        default=None, strict=False, description="The letters of this job."
    )
    job_type: str | None = Field(
        default=None, min_length=1, max_length=128, description="The letters of jobs of a type."
    )
    reason: str | None = Field(
        default=None, min_length=1, max_length=1000, description="Letters whose reason has this."
    )

    @model_validator(mode="after")
    def _one_of(self) -> "PurgeIn":
        filtered = any(f is not None for f in (self.job_id, self.job_type, self.reason))
        if self.all == filtered:
            raise ValueError("give either all=true or at least one of job_id, job_type, reason")
        return self


class PurgeResult(BaseModel):
    purged: int
    complete: bool = Field(
        description="false when a filtered purge stopped after its scan limit: purge again."
    )


@router.post(
    "/dlq/purge",
    summary="Delete dead letters: all, or by job, job type or reason",
    description=PurgeDeadLetters.__doc__ or "",
)
async def purge_dead_letters(body: PurgeIn, purge: FromDishka[PurgeDeadLetters]) -> PurgeResult:
    purged = await purge(
        PurgeDeadLettersCommand(
            all=body.all,
            job_id=JobId(body.job_id) if body.job_id is not None else None,
            job_type=body.job_type,
            reason=body.reason,
        )
    )
    return PurgeResult(purged=purged.purged, complete=purged.complete)


class JobCountOut(BaseModel):
    type: str
    status: str
    count: int


class FailureOut(BaseModel):
    id: uuid.UUID
    type: str
    tenant_id: str
    attempts: int
    last_error: str | None
    finished_at: datetime | None


class OverviewOut(BaseModel):
    counts: list[JobCountOut] = Field(
        description="Jobs not ended (pending, running, retrying, blocked) now; ended ones "
        "(succeeded, failed, cancelled, expired) in the last 24 h"
    )
    queues: list[QueueOut] | None = Field(description="null when RabbitMQ cannot be asked")
    outbox_lag_s: float
    failures: list[FailureOut]


def overview_out(overview: Any) -> OverviewOut:
    return OverviewOut(
        counts=[
            JobCountOut(type=c.type, status=c.status.value, count=c.count) for c in overview.counts
        ],
        queues=None
        if overview.queues is None
        else [
            QueueOut(queue=q.queue, ready=q.ready, consumers=q.consumers) for q in overview.queues
        ],
        outbox_lag_s=round(overview.outbox_lag.total_seconds(), 3),
        failures=[
            FailureOut(
                id=job.id,
                type=job.type,
                tenant_id=job.tenant_id,
                attempts=job.attempts,
                last_error=job.last_error,
                finished_at=job.finished_at,
            )
            for job in overview.failures
        ],
    )


@router.get("/overview", summary="Job counts, queue depths, outbox lag and recent failures")
async def overview(get: FromDishka[GetOpsOverview]) -> OverviewOut:
    return overview_out(await get())


jobs_router = APIRouter(
    prefix="/jobs", tags=["jobs"], route_class=JobsRoute, responses=ERROR_RESPONSES
)


class RedrivenJobOut(JobOut):
    dead_letters: str = Field(
        description="What became of the job's stale dead letters: how many left the DLQ, "
        "or why they stay (a DLQ declared without its delivery limit is not looked through)."
    )


@jobs_router.post(
    "/{job_id}/redrive",
    status_code=202,
    summary="Run a failed job again (admin key)",
    description=f"{RedriveJob.__doc__}\n\nAn operator endpoint: it needs an admin API key "
    "and acts on any tenant's job.",
    dependencies=[RateLimitEnqueue],
    responses=ADMIN_ERROR_RESPONSES,
)
async def redrive_job(
    job_id: uuid.UUID, _admin: AdminPrincipal, redrive: FromDishka[RedriveJob]
) -> RedrivenJobOut:
    done = await redrive(RedriveJobCommand(tenant_id=None, job_id=JobId(job_id)))
    return RedrivenJobOut(**JobOut.of(done.job).model_dump(), dead_letters=done.dead_letters.note)
