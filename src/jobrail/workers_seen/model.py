"""A process that runs jobs, as its beats show it, and the rule that says whether it is
alive."""

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal

WorkerState = Literal["alive", "gone", "stopped"]
STATES: tuple[WorkerState, ...] = ("alive", "gone", "stopped")

MISSED_BEATS = 3
"""A worker that has not beaten for this many intervals is gone."""


@dataclass(frozen=True, slots=True)
class WorkerBeat:
    id: str
    host: str
    pid: int
    version: str
    queues: tuple[str, ...]
    concurrency: int
    running: tuple[str, ...]
    started_at: datetime
    beat_at: datetime
    stopped_at: datetime | None = None


def state_of(worker: WorkerBeat, now: datetime, interval: timedelta) -> WorkerState:
    """Stopped once it said so (a clean stop); gone when its last beat is more than
    MISSED_BEATS intervals old (killed, or cut off from the database); alive otherwise."""
    if worker.stopped_at is not None:
        return "stopped"
    if now - worker.beat_at > MISSED_BEATS * interval:
        return "gone"
    return "alive"
