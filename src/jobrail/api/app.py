"""The FastAPI application factory."""

import logging
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager

from dishka.integrations.fastapi import setup_dishka
from fastapi import FastAPI
from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware

from jobrail.api import admin, events, flows, health, jobs, metrics, ops
from jobrail.api.errors import JsonCORSMiddleware, install_error_handlers
from jobrail.api.guard import RequestGuard
from jobrail.bootstrap import Runtime, build_runtime, serving
from jobrail.limits.api import ApiRateLimiter
from jobrail.modules import Module
from jobrail.settings import Settings, load_settings
from jobrail.telemetry.http import RequestTelemetry
from jobrail.telemetry.tracing import configure_tracing
from jobrail.tenants.use_cases import Authenticate
from jobrail.version import __version__

log = logging.getLogger("jobrail.api")


def create_app(
    settings: Settings | None = None,
    *,
    modules: Sequence[Module] = (),
    runtime: Runtime | None = None,
    serve: Callable[[FastAPI], AbstractAsyncContextManager[None]] | None = None,
) -> FastAPI:
    """The API: the modules of the settings, then `modules`. In embedded mode it also
    runs the worker and the relay in-process. ``JobRail.app`` gives its own `runtime`
    (built from the same settings and its modules) and `serve`, its lifespan."""
    settings = settings or load_settings()
    if runtime is None:
        configure_tracing(settings.telemetry)
        runtime = build_runtime(settings, worker=False, modules=modules)
    built = runtime

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        app.state.api_limiter = await built.container.get(ApiRateLimiter)
        app.state.authenticate = await built.container.get(Authenticate)
        async with serving(built) if serve is None else serve(app):
            yield

    docs = settings.docs_enabled
    app = FastAPI(
        title="jobrail",
        version=__version__,
        summary="Durable jobs: 202 and a job id now; the work runs in a worker.",
        lifespan=lifespan,
        openapi_url="/openapi.json" if docs else None,
        docs_url="/docs" if docs else None,
        redoc_url=None,
        # The server span is RequestTelemetry's: FastAPI's own would record query strings.
        # Metrics are Prometheus's (jobrail.telemetry.metrics) and logs jobrail's JSON
        # ones; FastAPI's own would otherwise look for their OpenTelemetry providers in
        # the environment on every request.
        telemetry={"tracing": False, "metrics": False, "logs": False},
    )
    # Middlewares run outermost last-added first: telemetry, CORS, the guard (size, NUL,
    # 500s). The JSON 500 is made inside CORS, so that a browser page sees it (and its
    # request id).
    app.add_middleware(RequestGuard, max_body_bytes=settings.api.max_body_bytes)
    if settings.api.cors_origins:
        app.add_middleware(
            JsonCORSMiddleware,
            allow_origins=settings.api.cors_origins,
            allow_methods=["GET", "POST"],
            allow_headers=[
                "Authorization",
                "Content-Type",
                "Idempotency-Key",
                "X-Request-Id",
                "traceparent",
                "tracestate",
            ],
            expose_headers=[
                "X-Request-Id",
                "Retry-After",
                "RateLimit-Limit",
                "RateLimit-Remaining",
                "RateLimit-Reset",
            ],
        )
    # Last added, so outermost: every response (a 413 or a 500 too) gets a request id
    # and a span.
    app.add_middleware(RequestTelemetry)
    if settings.api.trusted_proxies:
        # uvicorn's own, here rather than in the server (`jobrail api` turns the server's
        # off) so that it applies however the app is served; it takes the rightmost
        # X-Forwarded-For address that is not a trusted proxy.
        app.add_middleware(ProxyHeadersMiddleware, trusted_hosts=settings.api.trusted_proxies)
    app.state.runtime = runtime
    install_error_handlers(app)
    app.include_router(health.router)
    app.include_router(health.ready_router)
    app.include_router(metrics.router)
    app.include_router(jobs.router)
    app.include_router(flows.router)
    app.include_router(events.router)
    # Routes are matched in order, one by one: the product's before the operators'.
    for module in runtime.modules:
        for router in module.routers_for(settings):
            app.include_router(router)
    app.include_router(admin.router)
    app.include_router(ops.router)
    setup_dishka(runtime.container, app)
    return app


def runtime_of(app: FastAPI) -> Runtime:
    runtime: Runtime = app.state.runtime
    return runtime
