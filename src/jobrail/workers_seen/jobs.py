"""Housekeeping of the workers table, as a scheduled job of the ``_system`` tenant."""

from dishka import FromDishka
from pydantic import BaseModel, ConfigDict

from jobrail.jobs.registry import job
from jobrail.worker.context import JobContext
from jobrail.workers_seen.use_cases import PruneQuietWorkers


class NoPayload(BaseModel):
    model_config = ConfigDict(extra="forbid")


@job("workers_seen.prune_workers", payload=NoPayload, timeout_s=60, max_attempts=2)
async def prune_workers(
    payload: NoPayload, ctx: JobContext, prune: FromDishka[PruneQuietWorkers]
) -> dict[str, int]:
    """Delete the rows of the workers gone or stopped for more than an hour."""
    return {"deleted": await prune()}
