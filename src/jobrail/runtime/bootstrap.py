"""Builds a process: modules, job registry, broker and DI container, from settings.

The API (``jobrail.runtime.app``) and the workers (``jobrail.facade.worker``) both start here,
so they run the same use cases with the same wiring.
"""

import asyncio
import contextlib
import gc
import logging
from collections.abc import AsyncIterator, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any

from dishka import AsyncContainer, make_async_container
from dishka.integrations.fastapi import FastapiProvider
from sqlalchemy import select, update
from taskiq import AsyncBroker, TaskiqEvents, TaskiqState

from jobrail.events.catalog import EventCatalog
from jobrail.events.ioc import EventsProvider
from jobrail.jobs.domain import JobStatus
from jobrail.jobs.enqueue import message_for
from jobrail.jobs.registry import JobRegistry
from jobrail.kernel.clock import Clock
from jobrail.kernel.ids import TenantId
from jobrail.modules import LoopProcess, Module
from jobrail.ops.ioc import OpsProvider
from jobrail.ops.schedules import DeclaredSchedules
from jobrail.runtime.container import PlatformProvider, ProcessRole
from jobrail.runtime.modules import load_modules
from jobrail.runtime.schedules import build_scheduler, declared_schedules
from jobrail.settings import Settings
from jobrail.store.mapping import job_from_row
from jobrail.store.tables import dispatch_queues, jobs
from jobrail.telemetry.ioc import TelemetryProvider
from jobrail.telemetry.metrics import Metrics
from jobrail.telemetry.metrics_server import WorkerMetricsServer
from jobrail.tenants.ports import TenantDirectory
from jobrail.transport.amqp_broker import AmqpJobBroker
from jobrail.transport.brokers import JobBroker
from jobrail.transport.codec import encode
from jobrail.transport.embedded_broker import EmbeddedJobBroker
from jobrail.transport.receiver import JobReceiver
from jobrail.transport.tasks import JobRoutes, register_job_tasks
from jobrail.worker.limits_startup import LimitsMiddleware

log = logging.getLogger("jobrail")


# How long the background loops have to end their pass once asked to stop, before
# they are cancelled: well within every process's graceful stop.
LOOP_STOP_GRACE_S = 2.0


@dataclass
class Runtime:
    settings: Settings
    modules: list[Module]
    registry: JobRegistry
    broker: AsyncBroker
    container: AsyncContainer
    _background: list[asyncio.Task[Any]] = field(default_factory=list)
    _stopping: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def job_broker(self) -> JobBroker:
        broker: Any = self.broker
        return broker  # type: ignore[no-any-return]

    async def start_loops(self, process: LoopProcess) -> None:
        """The loaded modules' background loops (``Module.loops``) that run in `process`,
        in the modules' order, until `stop_background` stops them."""
        for module in self.modules:
            for loop in module.loops:
                if loop.runs_in(process, self.settings):
                    work = await self.container.get(loop.dependency)
                    self.run_in_background(loop.run(work, self._stopping), name=loop.name)

    async def start_scheduler(self) -> None:
        """Embedded mode: fire the modules' schedules in this process, as `jobrail
        scheduler` does in the stack (JOBRAIL_SCHEDULER__EMBEDDED=false turns it off)."""
        if not self.settings.embedded or not self.settings.scheduler.embedded:
            return
        scheduler = await build_scheduler(
            self.container, self.settings.scheduler, self.modules, self.registry
        )
        # Set at shutdown (stop_background): Scheduler.run ends its tick and resigns.
        self.run_in_background(scheduler.run(self._stopping), name="scheduler")

    def run_in_background(self, work: Coroutine[Any, Any, Any], *, name: str) -> None:
        """Run `work` until `stop_background`: it sets the event the loops were given,
        and cancels `work` if it has not returned LOOP_STOP_GRACE_S later."""
        self._background.append(asyncio.create_task(work, name=name))

    def hurry(self) -> None:
        """A forced stop: the jobs this process runs (embedded mode) get no grace period
        at shutdown; they resume when it starts again."""
        if isinstance(self.broker, EmbeddedJobBroker):
            self.broker.hurry()

    async def stop_background(self) -> None:
        # Asked first, cancelled only if need be: a loop cancelled inside a database call
        # may leave its driver's work running past the event loop's end (aiosqlite's
        # thread then fails to hand back its result to a closed loop).
        self._stopping.set()
        tasks, self._background = self._background, []
        if tasks:
            _, running = await asyncio.wait(tasks, timeout=LOOP_STOP_GRACE_S)
            for task in running:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        self._stopping = asyncio.Event()


def job_catalog(
    settings: Settings, modules: Sequence[Module] = ()
) -> tuple[list[Module], JobRegistry, EventCatalog]:
    """The loaded modules, their job types and their events; ModuleLoadError for a
    module that does not load, ValueError for a job type or event the settings refuse
    (an unknown queue, a name taken twice, an event consumer that is no job type)."""
    loaded = [*load_modules(settings.modules), *modules]
    registry = JobRegistry(
        (spec for module in loaded for spec in module.jobs),
        queues=settings.rabbit.queues,
        default_timeout_s=settings.jobs.default_timeout_s,
        timeouts_s=settings.jobs.timeouts_s,
        redis_cluster=settings.redis.cluster and not settings.embedded,
    )
    events = EventCatalog(spec for module in loaded for spec in module.events)
    for spec in events:
        for consumer in spec.consumers:
            if registry.get(consumer) is None:
                raise ValueError(
                    f"event {spec.name} names consumer {consumer!r}, which is not a job type "
                    "of the loaded modules"
                )
    return loaded, registry, events


def build_runtime(settings: Settings, *, worker: bool, modules: Sequence[Module] = ()) -> Runtime:
    """The process's runtime: the modules named in the settings, then `modules` (those a
    host declared in code, through ``jobrail.JobRail``)."""
    modules, registry, events = job_catalog(settings, modules)
    broker: AmqpJobBroker | EmbeddedJobBroker
    if settings.embedded:
        broker = EmbeddedJobBroker(
            settings.rabbit,
            max_running=settings.worker.max_async_tasks,
            shutdown_grace_s=settings.worker.shutdown_grace_s,
        )
    else:
        broker = AmqpJobBroker(settings.rabbit, consume=settings.worker.queues)
    broker.is_worker_process = worker or settings.embedded
    routes = JobRoutes(
        registry,
        settings.rabbit.default_queue,
        batch_window_s=settings.worker.batch_window_ms / 1000,
        wave_size=settings.worker.wave_size,
        wave_wait_s=settings.worker.wave_wait_ms / 1000,
    )
    register_job_tasks(broker, routes)
    if isinstance(broker, EmbeddedJobBroker):
        # Job messages take the worker processes' path (decoded once, run straight
        # through their route) rather than Taskiq's, which also logged every job stopped
        # at shutdown as an error with its CancelledError's traceback.
        broker.receiver = JobReceiver(
            broker, executor=broker.executor, max_async_tasks=settings.worker.max_async_tasks
        )
    container = make_async_container(
        PlatformProvider(),
        EventsProvider(),
        OpsProvider(),
        TelemetryProvider(),
        *(provider for module in modules for provider in module.providers),
        FastapiProvider(),
        context={
            Settings: settings,
            JobRegistry: registry,
            JobBroker: broker,
            EventCatalog: events,
            ProcessRole: ProcessRole.WORKER if worker else ProcessRole.API,
            DeclaredSchedules: declared_schedules(modules, settings.scheduler, registry),
        },
    )
    routes.use(container)

    async def start_routes(_state: TaskiqState) -> None:
        await routes.start()

    broker.add_event_handler(TaskiqEvents.WORKER_STARTUP, start_routes)
    return Runtime(settings, modules, registry, broker, container)


@contextlib.asynccontextmanager
async def serving(runtime: Runtime) -> AsyncIterator[None]:
    """What an API process runs while it serves: the broker, the demo tenant's seed where
    the demo is loaded (or the warning of a stale one), the modules' background loops of
    its kind of process, and in embedded mode first the jobs left unfinished and last
    the scheduler; at the end it stops them and closes the container."""
    await runtime.broker.startup()
    try:
        await seed_demo_tenant(runtime)
        if runtime.settings.embedded:
            await resume_unfinished_jobs(runtime)
            await runtime.start_loops(LoopProcess.EMBEDDED)
            await runtime.start_scheduler()
        else:
            await runtime.start_loops(LoopProcess.API)
        yield
    finally:
        await runtime.stop_background()
        await runtime.broker.shutdown()
        await runtime.container.close()


def install_worker_lifecycle(runtime: Runtime) -> None:
    """Worker processes run the modules' background loops (the relays) and serve their
    metrics (see jobrail.telemetry.metrics); on shutdown they stop both and close the
    container."""
    # `jobrail worker` checks this before it starts Taskiq; a broker started some other
    # way must not serve its metrics port to anyone in production either.
    runtime.settings.check_can_serve(worker=True)
    metrics_server = WorkerMetricsServer(runtime.settings.metrics)

    async def on_startup(_state: TaskiqState) -> None:
        await runtime.start_loops(LoopProcess.WORKER)
        await metrics_server.start(await runtime.container.get(Metrics))

    async def on_shutdown(_state: TaskiqState) -> None:
        await metrics_server.stop()
        await runtime.stop_background()
        await runtime.container.close()

    runtime.broker.add_middlewares(LimitsMiddleware(runtime.container))
    runtime.broker.add_event_handler(TaskiqEvents.WORKER_STARTUP, on_startup)
    runtime.broker.add_event_handler(TaskiqEvents.WORKER_SHUTDOWN, on_shutdown)


YOUNG_GC_THRESHOLD = 20_000


def settle_heap() -> None:
    """Once a process of jobrail's own (``jobrail api``, ``jobrail run``, a ``jobrail
    worker`` process) has started: what start-up made (modules, the app, its routes and
    schemas, the container, the pools) is collected once and then frozen out of the
    cyclic collector's sight (``gc.freeze``), and the young generation is collected
    every 20,000 allocations rather than Python's 700.

    Each full collection otherwise walked every object start-up had made, and a
    request or a job allocates a few hundred: under load a fifth of the API's CPU went
    to the collector. With this, `POST /demo/echo` took a fifth less CPU per request,
    side by side (1.05 -> 0.80 ms); a worker's jobs/s did not move measurably (its pace
    is the database's and the broker's). Frozen objects are still freed by reference
    counting; only their cycles are never collected, and start-up's garbage is
    collected first. Not done in a host's process: the host owns its collector."""
    gc.collect()
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_GC_THRESHOLD, middle, old)


DEMO_TENANT = "demo"
DEMO_MODULE = "demo"


def seeds_demo_tenant(settings: Settings) -> bool:
    """Whether this process seeds the tenant ``demo``: where the demo module is loaded,
    in the embedded mode, and only into a SQLite database.

    The tenant is the demo's: its key is what the README's walkthrough of ``POST
    /demo/echo`` uses. A host app that did not ask for the demo (a ``JobRail`` loads it
    only where its app or ``JOBRAIL_MODULES`` names it) gets no admin key anyone can
    guess in its database, whichever routes of jobrail it mounts.

    The embedded mode is a sandbox whose database is a file of its own (by default
    ``var/jobrail.db``). Pointed at Postgres, it is sharing a database that a stack
    deployment may use, and a seeded admin key with a well-known value would stay there
    after it stops; so it seeds nothing there (make a tenant with ``jobrail tenants``). The
    stack mode never seeds, and production refuses the embedded mode (see Settings)."""
    return DEMO_MODULE in settings.modules and settings.embedded and settings.database.is_sqlite


async def seed_demo_tenant(runtime: Runtime) -> None:
    """A tenant ``demo`` (an admin: the embedded mode is a sandbox) whose key is
    ``demo_api_key``, where ``seeds_demo_tenant`` says so. Runs at every start; a changed
    key is added to the old ones, a revoked one stays revoked.

    Anywhere else it seeds nothing, and warns if the demo key is a live key of this
    database (an embedded run of an older jobrail, or a `make api` that was the embedded
    mode, left it there): an admin key anyone can guess."""
    from jobrail.kernel.errors import ConflictError
    from jobrail.tenants.domain import Tenant
    from jobrail.tenants.ports import TenantExistsError
    from jobrail.tenants.use_cases import IssueApiKey

    directory = await runtime.container.get(TenantDirectory)
    if not seeds_demo_tenant(runtime.settings):
        await _warn_if_demo_key_is_live(runtime, directory)
        return
    clock = await runtime.container.get(Clock)
    with contextlib.suppress(TenantExistsError):
        await directory.create_tenant(
            Tenant(id=TenantId(DEMO_TENANT), admin=True, created_at=clock.now())
        )
    issue = await runtime.container.get(IssueApiKey)
    with contextlib.suppress(ConflictError):  # the key is there already
        await issue(TenantId(DEMO_TENANT), key=runtime.settings.demo_api_key.get_secret_value())


async def _warn_if_demo_key_is_live(runtime: Runtime, directory: TenantDirectory) -> None:
    from jobrail.tenants.domain import digest

    key = runtime.settings.demo_api_key.get_secret_value()
    try:
        principal = await directory.principal_for(digest(key))
    except Exception as exc:  # noqa: BLE001 - a database that cannot answer yet (/ready
        # says so) or is not migrated (every request says so) is no reason to stop here
        log.info("could not look for the demo API key: %s", type(exc).__name__)
        return
    if principal is not None:
        log.warning(
            "the embedded mode's demo API key is a live %skey of tenant %r in this database: "
            "anyone can guess it; revoke it with `jobrail tenants revoke-key %s`",
            "admin " if principal.admin else "",
            principal.tenant_id,
            principal.key_id,
        )


async def resume_unfinished_jobs(runtime: Runtime) -> int:
    """Embedded mode only: its queues live in memory, so after a restart the jobs table
    is the only record of unfinished work. Publish every unfinished job again, but those
    held for the dispatcher (jobrail.dispatch), which this process's dispatcher releases
    at once: the lease of the process that ran before is ended."""
    from sqlalchemy.ext.asyncio import AsyncEngine

    engine = await runtime.container.get(AsyncEngine)
    unfinished = [JobStatus.PENDING.value, JobStatus.RETRYING.value, JobStatus.RUNNING.value]
    async with engine.begin() as conn:
        await conn.execute(update(dispatch_queues).values(lease_until=None))
        rows = (
            (
                await conn.execute(
                    select(jobs).where(jobs.c.status.in_(unfinished), jobs.c.held_since.is_(None))
                )
            )
            .mappings()
            .all()
        )
    for row in rows:
        job = job_from_row(row)
        due = job.lease_until or job.run_after
        await runtime.job_broker.publish(
            encode(message_for(job, runtime.registry.get(job.type), due))
        )
    if rows:
        log.info("resumed %d unfinished jobs", len(rows))
    return len(rows)
