"""``JobRail``: jobrail inside a host's own FastAPI app.

A thin facade over what ``jobrail api`` and ``jobrail worker`` build
(``jobrail.runtime.bootstrap.build_runtime``: the job registry, the broker, the dishka
container of ``jobrail.runtime.container``): job types declared in code, enqueued through
``EnqueueJob`` (on their own, or in the host's own session), the runtime's start and
stop in the host's lifespan, and the jobs routes scoped by the host's own tenant.

A host's process is the host's own: the rail leaves its logging alone (its loggers,
``jobrail.*``, propagate to whatever the host set up) and its garbage collector, and it
migrates only when asked (``migrate``); a lifespan on a database that is not migrated
stops at once with ``SchemaNotMigratedError``, saying what to run.
"""

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Any, TypeVar

from dishka import AsyncContainer, Provider
from fastapi import APIRouter, FastAPI
from pydantic import BaseModel
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession

from jobrail.facade.handle import JobHandle
from jobrail.facade.host_session import SessionHooks, host_session_unit
from jobrail.facade.routes import jobs_router
from jobrail.http.auth import ApiServices
from jobrail.jobs.enqueue import EnqueueJob
from jobrail.jobs.intake import EnqueueJobCommand, EnqueueResult
from jobrail.jobs.priority import Priority
from jobrail.jobs.registry import HandlerFunc, JobSpec, job
from jobrail.kernel.clock import Clock
from jobrail.limits.api import ApiRateLimiter
from jobrail.limits.model import Lock, RateOrSlots
from jobrail.modules import Module
from jobrail.outbox.committing import AfterCommit
from jobrail.runtime.bootstrap import Runtime, build_runtime, serving
from jobrail.runtime.modules import load_modules, with_default_modules
from jobrail.settings import Settings, load_settings
from jobrail.store.schema import (
    MigrationChain,
    MigrationError,
    SchemaNotMigratedError,
    not_up_to_date,
    sqlite_path,
    upgrade,
)
from jobrail.telemetry.tracing import configure_tracing
from jobrail.tenants.use_cases import Authenticate

P = TypeVar("P", bound=BaseModel)

MODULE_NAME = "jobrail.facade"


class JobRail:
    """jobrail for a host app: declare job types, enqueue them, serve their status.

    ``settings`` are read from the environment (``JOBRAIL_*``) when not given. Job types
    are declared with ``@rail.job(...)`` before the runtime is built: on first use
    (an enqueue, ``container``) or at the start of ``lifespan``. The modules named in the
    settings (``JOBRAIL_MODULES``; unset, the rail's `default_modules`: none unless
    given) are loaded besides them.

    One ``JobRail`` is one runtime at a time: its lifespan builds it (unless an enqueue
    did first) and closes it at the end, and a later lifespan builds a new one, as a
    test suite that enters ``TestClient(app)`` in each test does. The app of ``app()``
    holds the runtime it was made with: its lifespan runs once.
    """

    def __init__(
        self,
        settings: Settings | None = None,
        *,
        modules: Sequence[Module] = (),
        providers: Sequence[Provider] = (),
        default_modules: Sequence[str] = (),
    ) -> None:
        """`modules`: modules (bounded contexts) to load besides the job types declared
        on the rail, as this repository's reference application does (``workers.app``).
        `providers`: the host's own dishka providers, added to jobrail's container, so
        that its job handlers can take the host's services (``FromDishka[...]``).
        `default_modules`: the installed modules to load where the settings do not name
        any (``JOBRAIL_MODULES`` unset; never in production): none unless given, so that
        a host app gets no demo (its routes, and its admin tenant with a well-known key)
        unless it asks; the reference application names ``demo``.
        Without `settings`, they are read from the environment on first use, so that
        importing the module that makes the rail reads nothing."""
        self._given_settings = settings
        self._settings: Settings | None = None
        self._default_modules = tuple(default_modules)
        self._modules = tuple(modules)
        self._providers = tuple(providers)
        self._specs: list[JobSpec] = []
        self._runtime: Runtime | None = None
        self._worker = False
        self._hooks: SessionHooks | None = None
        self._enqueue: EnqueueJob | None = None
        self._serving = False
        self._app_made = False  # app() holds the runtime: it cannot be rebuilt
        self._closed = False

    # -- job types --------------------------------------------------------------------

    def job(
        self,
        name: str,
        *,
        payload: type[P],
        queue: str = "jobs.default",
        timeout_s: float | None = None,
        max_attempts: int | None = None,
        limits: Sequence[RateOrSlots] = (),
        lock: Lock | None = None,
        retry_base_s: float | None = None,
        retry_cap_s: float | None = None,
        max_wait_s: float | None = None,
        open_to_tenants: bool = False,
        priority: Priority | str = Priority.NORMAL,
        fair_key: str | None = None,
    ) -> Callable[[HandlerFunc], JobHandle[P]]:
        """Declare a job type whose handler is the decorated function, as
        ``jobrail.jobs.registry.job`` does, and return its ``JobHandle``.

        The handler is ``async def handler(payload: P, ctx: JobContext) -> dict | None``
        (it may also ask for ``FromDishka[...]`` dependencies). ``limits`` and ``lock``
        are acquired together before each attempt, their keys templated from the
        payload's fields and ``tenant_id``; ``max_attempts``, ``retry_base_s`` and
        ``retry_cap_s`` override the retry policy for this type; ``max_wait_s`` caps how
        long a job may wait for its limits and lock before it fails; ``open_to_tenants``
        lets a tenant enqueue it by its name (``POST {prefix}`` of ``router``);
        ``priority`` is its jobs' when an enqueue gives none; ``fair_key`` splits a
        tenant's share equally between its keys under fair dispatch."""
        declare = job(
            name,
            payload=payload,
            queue=queue,
            timeout_s=timeout_s,
            max_attempts=max_attempts,
            limits=limits,
            lock=lock,
            retry_base_s=retry_base_s,
            retry_cap_s=retry_cap_s,
            max_wait_s=max_wait_s,
            open_to_tenants=open_to_tenants,
            priority=priority,
            fair_key=fair_key,
        )

        def register(handler: HandlerFunc) -> JobHandle[P]:
            if self._runtime is not None:
                raise RuntimeError(
                    f"job type {name!r} is declared after the runtime was built: declare "
                    "every job type before the first enqueue or the lifespan's start"
                )
            if any(spec.name == name for spec in self._specs):
                raise ValueError(f"job type {name!r} is declared twice")
            spec = declare(handler)
            self._specs.append(spec)
            return JobHandle(self, spec)

        return register

    @property
    def settings(self) -> Settings:
        """The settings given, or those of the environment (``JOBRAIL_*``), read once,
        with the rail's `default_modules` where they name no modules; SettingsError for a
        setting they refuse."""
        if self._settings is None:
            given = self._given_settings if self._given_settings is not None else load_settings()
            self._settings = with_default_modules(given, self._default_modules)
        return self._settings

    @property
    def module(self) -> Module:
        """The job types declared on this rail, as a module of the runtime."""
        return Module(name=MODULE_NAME, jobs=tuple(self._specs), providers=self._providers)

    @property
    def modules(self) -> list[Module]:
        """The modules this rail adds to those of the settings: the ones it was given,
        then its own job types."""
        return [*self._modules, self.module]

    @property
    def migration_chains(self) -> list[MigrationChain]:
        """The Alembic chains jobrail runs for this rail after the platform's own: those
        the modules of the settings and the rail's modules name (ModuleLoadError for a
        module that does not load)."""
        loaded = [*load_modules(self.settings.modules), *self.modules]
        return [chain for module in loaded for chain in module.migrations]

    # -- the database -----------------------------------------------------------------

    async def migrate(self) -> None:
        """Bring jobrail's database to the heads of the platform's chain and of
        `migration_chains`, as ``jobrail migrate --app`` does for this rail: from a test
        suite's fixture or a start-up script, in this process. Alembic is synchronous, so
        it runs in a thread of its own, not on the event loop. MigrationError, or
        Alembic's CommandError, for a chain that cannot run."""
        database = self.settings.database
        chains = self.migration_chains
        path = sqlite_path(database)
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
        await asyncio.to_thread(upgrade, database, chains)

    @asynccontextmanager
    async def session(self) -> AsyncIterator[AsyncSession]:
        """A SQLAlchemy ``AsyncSession`` on jobrail's database, on the engine and pool of
        the rail's runtime, which close with it at the end of the lifespan: for the
        host's own tables beside jobrail's, and for enqueueing in the host's transaction
        (``enqueue(..., session=session)``). Nothing commits unless the host commits;
        attributes are not expired on commit, as async code wants. With
        ``JOBRAIL_DATABASE__SCHEMA`` its connections find jobrail's tables first: a host
        table of the same name is reached by its schema (``public.jobs``)."""
        engine = await self.container.get(AsyncEngine)
        async with AsyncSession(engine, expire_on_commit=False) as session:
            yield session

    # -- the runtime ------------------------------------------------------------------

    def build(self, *, worker: bool = False) -> Runtime:
        """The runtime, built on first call: for an API process, or with `worker` for a
        worker process (``jobrail worker --app``). Later calls return it."""
        if self._runtime is None or (worker and not self._worker and self._untouched()):
            # `jobrail worker --app` imports the host's module, which may have built the
            # API's runtime already (`app.mount("/jobrail", rail.app())` at import): a
            # worker process serves no API, and that runtime never started.
            configure_tracing(self.settings.telemetry)
            self._runtime = build_runtime(self.settings, worker=worker, modules=self.modules)
            self._worker = worker
        elif worker != self._worker:
            role = "a worker" if self._worker else "an API process"
            raise RuntimeError(f"this JobRail's runtime was built for {role} already")
        return self._runtime

    def _untouched(self) -> bool:
        """Whether the runtime built has neither served nor enqueued: nothing of it is
        open that a new one would leave behind."""
        used = self._enqueue is not None or self._hooks is not None
        return not (self._serving or self._closed or used)

    @property
    def runtime(self) -> Runtime:
        return self.build(worker=self._worker)

    @property
    def container(self) -> AsyncContainer:
        """jobrail's dishka container (its use cases, e.g. ``GetJob``, ``CancelJob``)."""
        return self.runtime.container

    @asynccontextmanager
    async def lifespan(self, _app: object = None) -> AsyncIterator[None]:
        """Start what an API process runs (the broker; in embedded mode the in-process
        worker, the outbox relay and the scheduler) and stop it at the end, closing
        the container. Pass it as ``FastAPI(lifespan=rail.lifespan)``, or enter it in
        the host's own lifespan: ``async with rail.lifespan(app): yield``."""
        if self._serving:
            raise RuntimeError("this JobRail's lifespan is running already")
        if self._closed:
            raise RuntimeError(
                "this JobRail's app (rail.app()) has run its lifespan already, and its "
                "runtime is closed: make a new JobRail and app to serve again"
            )
        await self._check_schema()
        self._serving = True
        try:
            async with serving(self.runtime):
                try:
                    yield
                finally:
                    if self._hooks is not None:
                        await self._hooks.drain()  # before the broker stops
        finally:
            self._serving = False
            # The runtime's container is closed: the next lifespan (or enqueue) builds a
            # new one. Before, the next lifespan ran on the closed one, and its jobs
            # stayed pending without an error.
            if self._app_made:
                self._closed = True
            else:
                self._runtime = None
                self._hooks = None
                self._enqueue = None

    async def _check_schema(self) -> None:
        """A database that is not migrated for this rail is one line here, rather than a
        traceback from the first query of the start-up (``no such table: tenants``)."""
        try:
            problem = await asyncio.to_thread(
                not_up_to_date, self.settings.database, self.migration_chains
            )
        except MigrationError as exc:
            problem = str(exc)
        except Exception:  # noqa: BLE001 - the database's own error: an outage is waited
            # out (/ready says so), and anything else the first query says as it would
            return
        if problem is not None:
            raise SchemaNotMigratedError(
                f"jobrail's database is not migrated: {problem} (run `jobrail migrate "
                "--app <module>:<rail>` for this JobRail, or `await rail.migrate()`)"
            )

    def app(self) -> FastAPI:
        """jobrail's own API (``jobrail api --app``) on this rail's runtime: the jobs,
        admin and ops routes, the routes of the modules, jobrail's API keys; its
        lifespan is the rail's."""
        from jobrail.runtime.app import create_app

        self._app_made = True
        return create_app(self.settings, runtime=self.build(), serve=self.lifespan)

    def install(self, app: FastAPI) -> None:
        """Run ``lifespan`` around `app`'s own lifespan (it starts first, stops last)."""
        host = app.router.lifespan_context

        @asynccontextmanager
        async def lifespan(running: Any) -> AsyncIterator[Any]:
            async with self.lifespan(running), host(running) as state:
                yield state

        app.router.lifespan_context = lifespan

    # -- enqueueing -------------------------------------------------------------------

    async def enqueue(
        self, cmd: EnqueueJobCommand, *, session: AsyncSession | None = None
    ) -> EnqueueResult:
        """``EnqueueJob`` on its own or, with `session`, in the host's session's
        transaction (see ``JobHandle.enqueue``)."""
        enqueue = await self._enqueue_job()
        if session is None:
            return await enqueue(cmd)
        unit = host_session_unit(
            session,
            await self.container.get(Clock),
            await self._session_hooks(),
            self.settings.database.schema_,
        )
        result = await enqueue.into(unit, cmd)
        await unit.commit()
        return result

    async def now(self) -> datetime:
        """The time of the rail's clock (its container's ``Clock``), which a handle's
        `delay` counts from."""
        clock: Clock = await self.container.get(Clock)
        return clock.now()

    async def _enqueue_job(self) -> EnqueueJob:
        if self._enqueue is None:
            self._enqueue = await self.container.get(EnqueueJob)
        return self._enqueue

    async def _session_hooks(self) -> SessionHooks:
        if self._hooks is None:
            self._hooks = SessionHooks(await self.container.get(AfterCommit))
        return self._hooks

    # -- HTTP -------------------------------------------------------------------------

    async def api_services(self) -> ApiServices:
        """The key lookup and the throttle of jobrail's API keys."""
        return ApiServices(
            await self.container.get(Authenticate), await self.container.get(ApiRateLimiter)
        )

    def router(
        self,
        *,
        tenant: Callable[..., Awaitable[str] | str] | None = None,
        prefix: str = "/jobs",
        tags: Sequence[str] = ("jobs",),
    ) -> APIRouter:
        """The jobs routes (``POST {prefix}`` for the types declared
        ``open_to_tenants``, ``GET {prefix}/{id}``, ``GET {prefix}``, ``POST
        {prefix}/{id}/cancel``) for the host's app, every one scoped to the tenant that
        `tenant` (a FastAPI dependency of the host's) returns; another tenant's job is a
        404. Without `tenant`, jobrail's API keys say who the tenant is
        (``Authorization: Bearer <key>``). Their errors are JSON whatever handlers the
        host installed."""
        return jobs_router(self, tenant=tenant, prefix=prefix, tags=list(tags))
