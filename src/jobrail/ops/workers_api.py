"""``GET /admin/workers``: every process that runs jobs, from its beats
(jobrail.workers_seen)."""

from datetime import datetime

from dishka.integrations.fastapi import FromDishka
from pydantic import BaseModel

from jobrail.ops.admin_routes import admin_router
from jobrail.workers_seen.model import WorkerState
from jobrail.workers_seen.use_cases import ListWorkers, SeenWorker

router = admin_router()


class WorkerOut(BaseModel):
    id: str
    state: WorkerState
    host: str
    pid: int
    version: str
    queues: list[str]
    concurrency: int
    running: list[str]
    started_at: datetime
    beat_at: datetime
    stopped_at: datetime | None

    @classmethod
    def of(cls, seen: SeenWorker) -> "WorkerOut":
        w = seen.worker
        return cls(
            id=w.id,
            state=seen.state,
            host=w.host,
            pid=w.pid,
            version=w.version,
            queues=list(w.queues),
            concurrency=w.concurrency,
            running=list(w.running),
            started_at=w.started_at,
            beat_at=w.beat_at,
            stopped_at=w.stopped_at,
        )


class WorkerList(BaseModel):
    items: list[WorkerOut]


@router.get(
    "/workers",
    summary="The workers and what they run",
    description="Every `jobrail worker` process and embedded runtime that beat within the "
    "last hour, the most recently started first: `alive`, `gone` (three beats missed: "
    "killed, or cut off from the database) or `stopped` (a clean stop), with the ids of "
    "the jobs it runs. As `jobrail workers`.",
)
async def list_workers(workers: FromDishka[ListWorkers]) -> WorkerList:
    return WorkerList(items=[WorkerOut.of(seen) for seen in await workers()])
