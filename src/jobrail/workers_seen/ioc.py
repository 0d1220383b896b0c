import os
import socket
import uuid
from datetime import timedelta

from dishka import Provider, Scope, decorate, provide
from sqlalchemy.ext.asyncio import AsyncEngine

from jobrail.kernel.clock import Clock
from jobrail.settings import Settings
from jobrail.telemetry.metrics import Metrics
from jobrail.telemetry.worker_metrics import WorkerStatesCollector
from jobrail.version import __version__
from jobrail.worker.running import RunningJobs
from jobrail.workers_seen.persistence import SqlaWorkerBook
from jobrail.workers_seen.use_cases import Heartbeat, Identity, ListWorkers, PruneQuietWorkers

QUIET_KEPT = timedelta(hours=1)


class WorkersSeenProvider(Provider):
    scope = Scope.APP

    running = provide(RunningJobs)

    @provide
    def book(self, engine: AsyncEngine) -> SqlaWorkerBook:
        return SqlaWorkerBook(engine)

    @provide
    def heartbeat(
        self, book: SqlaWorkerBook, running: RunningJobs, clock: Clock, settings: Settings
    ) -> Heartbeat:
        identity = Identity(
            id=uuid.uuid4().hex,
            host=socket.gethostname(),
            pid=os.getpid(),
            version=__version__,
            queues=tuple(settings.worker.queues or settings.rabbit.queues),
            concurrency=settings.worker.max_async_tasks,
        )
        interval = timedelta(seconds=settings.worker.beat_interval_s)
        return Heartbeat(book, running, clock, identity, interval)

    @provide
    def list_workers(self, book: SqlaWorkerBook, clock: Clock, settings: Settings) -> ListWorkers:
        return ListWorkers(book, clock, timedelta(seconds=settings.worker.beat_interval_s))

    @provide
    def prune(self, book: SqlaWorkerBook, clock: Clock) -> PruneQuietWorkers:
        return PruneQuietWorkers(book, clock, QUIET_KEPT)

    @decorate
    def metrics(self, metrics: Metrics, workers: ListWorkers, settings: Settings) -> Metrics:
        looked_up = settings.metrics.lookup_ttl_s, settings.metrics.lookup_timeout_s
        metrics.watch(WorkerStatesCollector(workers.counts, *looked_up))
        return metrics
