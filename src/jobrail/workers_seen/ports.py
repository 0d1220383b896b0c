"""What the workers' beats need: where they are written, and what runs now."""

from collections.abc import Sequence
from datetime import datetime
from typing import Protocol

from jobrail.workers_seen.model import WorkerBeat


class WorkerBook(Protocol):
    async def beat(self, worker: WorkerBeat) -> None:
        """Write the worker's row as `worker` says: one upsert."""
        ...

    async def stopped(self, worker_id: str, at: datetime) -> None:
        """Mark the worker stopped at `at`."""
        ...

    async def all(self) -> Sequence[WorkerBeat]:
        """Every worker with a row, the most recently started first."""
        ...

    async def delete_quiet_before(self, cutoff: datetime) -> int:
        """Delete the rows of the workers whose last beat, or stop, was before `cutoff`;
        how many went."""
        ...


class RunningNow(Protocol):
    def ids(self) -> list[str]:
        """The ids of the jobs this process runs now."""
        ...
