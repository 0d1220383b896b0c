"""The FastAPI application factory."""

import logging
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

from dishka.integrations.fastapi import setup_dishka
from fastapi import APIRouter, FastAPI
from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware

from jobrail.events import api as events
from jobrail.events.use_cases import JobEvents
from jobrail.http.errors import ErrorBody, JsonCORSMiddleware, install_error_handlers
from jobrail.http.guard import RequestGuard
from jobrail.http.server import ShutdownHooks
from jobrail.jobs import api as jobs
from jobrail.jobs import flows_api as flows
from jobrail.limits.api import ApiRateLimiter
from jobrail.modules import Module
from jobrail.ops import admin_api as admin
from jobrail.ops import cancel_api, pauses_api, tenant_admin, workers_api
from jobrail.ops import console as ops
from jobrail.ops import console_actions as ops_actions
from jobrail.ops import console_bulk as ops_bulk
from jobrail.ops import console_pages as ops_pages
from jobrail.runtime import health
from jobrail.runtime import metrics_endpoint as metrics
from jobrail.runtime.bootstrap import Runtime, build_runtime, serving
from jobrail.runtime.outages import outage
from jobrail.settings import Settings, load_settings
from jobrail.telemetry.http import RequestTelemetry
from jobrail.telemetry.metrics import Metrics
from jobrail.telemetry.tracing import configure_tracing
from jobrail.tenants.use_cases import Authenticate
from jobrail.version import __version__

log = logging.getLogger("jobrail.api")
# The lifespan of a router that was given none (it runs on_startup and on_shutdown).
_NO_LIFESPAN = type(APIRouter().lifespan_context)


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
        app.state.http_metrics = (await built.container.get(Metrics)).http
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
        # Starlette's redirect from "/jobs/" to "/jobs" names the host of the request's
        # Host header: a cache in front could keep a redirect to any host. A 404 instead.
        redirect_slashes=False,
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
    install_error_handlers(app, outage)
    routers = [health.router, health.ready_router, metrics.router, jobs.router]
    routers += [admin.jobs_router]
    routers += [flows.router, events.router]
    # Routes are matched in order, one by one: the product's before the operators'.
    for module in runtime.modules:
        routers += module.routers_for(settings)
    admins = [admin.router, tenant_admin.router, pauses_api.router, cancel_api.router]
    admins += [workers_api.router]
    for router in [
        *routers,
        *admins,
        ops.router,
        ops_actions.router,
        ops_pages.router,
        ops_bulk.router,
    ]:
        add_routes(app, router)
    setup_dishka(runtime.container, app)
    document_body_limit(app, settings.api.max_body_bytes)
    return app


def document_body_limit(app: FastAPI, max_body_bytes: int) -> None:
    """Every operation that takes a request body may be answered 413 (RequestGuard, before
    any route runs), which no route declares: the app's OpenAPI document adds it to each
    of them, with the JSON error body of every other error."""
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:  # made once, then FastAPI serves it as it is
            _add_too_large(generate(), max_body_bytes)
        assert app.openapi_schema is not None
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def _add_too_large(document: dict[str, Any], max_body_bytes: int) -> None:
    schemas = document.setdefault("components", {}).setdefault("schemas", {})
    if "ErrorBody" not in schemas:
        error_body = ErrorBody.model_json_schema(ref_template="#/components/schemas/{model}")
        for name, schema in error_body.pop("$defs", {}).items():
            schemas.setdefault(name, schema)
        schemas["ErrorBody"] = error_body
    too_large = {
        "description": f"The request body is larger than {max_body_bytes} bytes "
        "(JOBRAIL_API__MAX_BODY_BYTES)",
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}},
    }
    for path in document.get("paths", {}).values():
        for operation in path.values():
            if isinstance(operation, dict) and "requestBody" in operation:
                operation.setdefault("responses", {}).setdefault("413", too_large)


def add_routes(app: FastAPI, router: APIRouter) -> None:
    """`router`'s routes, added to the app's own routes as they are: what
    ``app.include_router(router)`` without arguments means, matched once per request.

    An `APIRouter`'s routes already carry its prefix, tags, dependencies, responses
    and route class (FastAPI applies them when a route is declared). Included instead,
    they sit behind one of FastAPI's included-router layers, which matches a request
    against its routes twice (once to pick the router, once within it) with scope
    bookkeeping around each candidate: about 70 µs of every request that reaches a
    module's routes, measured with bench.profile_api. Routers with startup or shutdown
    handlers or a lifespan of their own still go through `include_router`, which
    merges them. tests/api/test_jobs_api.py checks that the routes keep what their
    router gave them."""
    own_lifespan = not isinstance(router.lifespan_context, _NO_LIFESPAN)
    if router.on_startup or router.on_shutdown or own_lifespan:
        app.include_router(router)
        return
    app.router.routes.extend(router.routes)


def runtime_of(app: FastAPI) -> Runtime:
    runtime: Runtime = app.state.runtime
    return runtime


def shutdown_hooks(app: FastAPI) -> ShutdownHooks:
    """What the app does when `jobrail api` or `jobrail run` stops
    (jobrail.http.server.JobrailServer): its event streams end as the server starts to
    stop, and a forced exit hurries its running jobs."""
    runtime = runtime_of(app)

    async def stopping() -> None:
        (await runtime.container.get(JobEvents)).end_streams()

    return ShutdownHooks(stopping=stopping, hurry=runtime.hurry)
