"""Housekeeping's job types. The scheduler enqueues them under the ``_system`` tenant;
a worker runs them like any other job."""

from dishka import FromDishka
from pydantic import BaseModel, ConfigDict

from jobrail.jobs.registry import job
from jobrail.maintenance.sampling import SampleOverview
from jobrail.maintenance.use_cases import (
    CheckOutboxLag,
    PruneFinishedJobs,
    PruneMessages,
    ReportDeadLetters,
)
from jobrail.worker.context import JobContext


class NoPayload(BaseModel):
    model_config = ConfigDict(extra="forbid")


@job("maintenance.prune_jobs", payload=NoPayload, timeout_s=600, max_attempts=3)
async def prune_jobs(
    payload: NoPayload, ctx: JobContext, prune: FromDishka[PruneFinishedJobs]
) -> dict[str, object]:
    """Delete finished jobs older than JOBRAIL_SCHEDULER__PRUNE_AFTER_DAYS, then the
    batches and chains that finished as long ago and have no job left."""
    pruned = await prune()
    return {
        "deleted": pruned.deleted,
        "flows_deleted": pruned.flows_deleted,
        "finished_before": pruned.finished_before.isoformat(),
    }


@job("maintenance.prune_messages", payload=NoPayload, timeout_s=600, max_attempts=3)
async def prune_messages(
    payload: NoPayload, ctx: JobContext, prune: FromDishka[PruneMessages]
) -> dict[str, object]:
    """Delete outbox rows published more than JOBRAIL_SCHEDULER__OUTBOX_KEEP_DAYS ago,
    inbox rows last taken more than JOBRAIL_SCHEDULER__INBOX_KEEP_DAYS ago and job events
    older than JOBRAIL_EVENTS__KEEP_DAYS."""
    pruned = await prune()
    return {
        "outbox_deleted": pruned.outbox_deleted,
        "published_before": pruned.published_before.isoformat(),
        "inbox_deleted": pruned.inbox_deleted,
        "taken_before": pruned.taken_before.isoformat(),
        "events_deleted": pruned.events_deleted,
    }


@job("maintenance.check_outbox_lag", payload=NoPayload, timeout_s=30, max_attempts=2)
async def check_outbox_lag(
    payload: NoPayload, ctx: JobContext, check: FromDishka[CheckOutboxLag]
) -> dict[str, object]:
    """Warn when the oldest unpublished outbox row is older than the threshold."""
    lag = await check()
    return {"lag_s": round(lag.lag_s, 3), "lagging": lag.lagging}


@job("maintenance.report_dead_letters", payload=NoPayload, timeout_s=30, max_attempts=2)
async def report_dead_letters(
    payload: NoPayload, ctx: JobContext, report: FromDishka[ReportDeadLetters]
) -> dict[str, int]:
    """Log how many messages wait in the dead-letter queue."""
    return {"dead_letters": await report()}


@job("maintenance.sample_overview", payload=NoPayload, timeout_s=50, max_attempts=1)
async def sample_overview(
    payload: NoPayload, ctx: JobContext, sample: FromDishka[SampleOverview]
) -> dict[str, int]:
    """Write the console overview's samples up to this minute (jobs finished by type and
    status, the time to start, the queue depths), and delete those older than a day."""
    sampled = await sample()
    return {"minutes": sampled.minutes, "deleted": sampled.deleted}
