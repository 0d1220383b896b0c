"""The worker's heartbeat, and what operators read of it."""

import asyncio
import logging
from collections import Counter
from dataclasses import dataclass
from datetime import timedelta

from jobrail.kernel.clock import Clock, sleep_unless
from jobrail.workers_seen.model import STATES, WorkerBeat, WorkerState, state_of
from jobrail.workers_seen.ports import RunningNow, WorkerBook

log = logging.getLogger("jobrail.workers")


@dataclass(frozen=True, slots=True)
class Identity:
    """What a process says of itself in every beat."""

    id: str
    host: str
    pid: int
    version: str
    queues: tuple[str, ...]
    concurrency: int


class Heartbeat:
    """Beat every `interval` while the process runs: one upsert of its row with the jobs
    it runs now.

    - A beat that fails (the database away) logs one warning and the next beat tries
      again; the process goes on running its jobs.
    - When the process stops cleanly, its row is marked stopped.
    """

    def __init__(
        self,
        book: WorkerBook,
        running: RunningNow,
        clock: Clock,
        identity: Identity,
        interval: timedelta,
    ) -> None:
        self._book = book
        self._running = running
        self._clock = clock
        self._identity = identity
        self._interval = interval
        self._started_at = clock.now()

    async def beat(self) -> bool:
        """One beat; False if it could not be written."""
        me = self._identity
        worker = WorkerBeat(
            me.id,
            me.host,
            me.pid,
            me.version,
            me.queues,
            me.concurrency,
            tuple(self._running.ids()),
            self._started_at,
            self._clock.now(),
        )
        try:
            await self._book.beat(worker)
        except Exception as exc:  # noqa: BLE001 - a missed beat must never stop the worker
            log.warning("worker beat failed (%s); trying again next beat", type(exc).__name__)
            return False
        return True

    async def run_forever(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            await self.beat()
            await sleep_unless(stop, self._interval.total_seconds())
        try:
            await self._book.stopped(self._identity.id, self._clock.now())
        except Exception as exc:  # noqa: BLE001 - it shows gone in a few beats instead
            log.warning("could not mark this worker stopped (%s)", type(exc).__name__)


@dataclass(frozen=True, slots=True)
class SeenWorker:
    worker: WorkerBeat
    state: WorkerState


class ListWorkers:
    """Every worker that beat lately, with its state (see `state_of`): alive, gone
    (three beats missed) or stopped (a clean stop)."""

    def __init__(self, book: WorkerBook, clock: Clock, interval: timedelta) -> None:
        self._book = book
        self._clock = clock
        self._interval = interval

    async def __call__(self) -> list[SeenWorker]:
        now = self._clock.now()
        return [
            SeenWorker(worker, state_of(worker, now, self._interval))
            for worker in await self._book.all()
        ]

    async def counts(self) -> dict[str, int]:
        """How many workers are in each state (every state, zero included)."""
        counted = Counter(seen.state for seen in await self())
        return {state: counted[state] for state in STATES}


class PruneQuietWorkers:
    """Delete the rows of the workers gone or stopped for more than `keep`; a live
    worker beats, so its row stays."""

    def __init__(self, book: WorkerBook, clock: Clock, keep: timedelta) -> None:
        self._book = book
        self._clock = clock
        self._keep = keep

    async def __call__(self) -> int:
        return await self._book.delete_quiet_before(self._clock.now() - self._keep)
