"""The FastAPI application factory."""

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from dishka.integrations.fastapi import setup_dishka
from fastapi import FastAPI

from jobrail import __version__
from jobrail.api import health, jobs
from jobrail.api.errors import install_error_handlers
from jobrail.api.tenancy import HeaderTenantResolver, TenantResolver
from jobrail.bootstrap import Runtime, build_runtime, resume_unfinished_jobs
from jobrail.limits.api import ApiRateLimiter
from jobrail.settings import Settings, load_settings

log = logging.getLogger("jobrail.api")


def create_app(
    settings: Settings | None = None, *, tenant_resolver: TenantResolver | None = None
) -> FastAPI:
    """The API. In embedded mode it also runs the worker and the relay in-process."""
    settings = settings or load_settings()
    runtime = build_runtime(settings, worker=False)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        app.state.api_limiter = await runtime.container.get(ApiRateLimiter)
        await runtime.broker.startup()
        if settings.embedded:
            await resume_unfinished_jobs(runtime)
            await runtime.start_relay()
        try:
            yield
        finally:
            await runtime.stop_background()
            await runtime.broker.shutdown()
            await runtime.container.close()

    app = FastAPI(
        title="jobrail",
        version=__version__,
        summary="Durable jobs: 202 and a job id now; the work runs in a worker.",
        lifespan=lifespan,
    )
    app.state.runtime = runtime
    app.state.tenant_resolver = tenant_resolver or HeaderTenantResolver()
    install_error_handlers(app)
    app.include_router(health.router)
    app.include_router(health.ready_router)
    app.include_router(jobs.router)
    for module in runtime.modules:
        for router in module.routers:
            app.include_router(router)
    setup_dishka(runtime.container, app)
    return app


def runtime_of(app: FastAPI) -> Runtime:
    runtime: Runtime = app.state.runtime
    return runtime
