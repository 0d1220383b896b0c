"""Every error leaves the API as JSON: ``{"error": {"code", "message", "details"}}``.

That holds for the answers made outside FastAPI's handlers too: the ASGI middlewares'
(``jobrail.http.guard.RequestGuard``'s size and NUL refusals, CORS preflight refusals),
an unexpected exception's 500 (``RequestGuard``, inside RequestTelemetry so that it
carries the request id), and
the HTTP server's own refusals of a request it cannot parse (``jobrail.http.server``).
"""

import json
import logging
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from pydantic import BaseModel
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.middleware.cors import CORSMiddleware
from starlette.responses import Response
from starlette.routing import BaseRoute, Match
from starlette.types import Send

from jobrail.kernel.errors import (
    BrokerUnavailableError,
    ConflictError,
    DomainError,
    InvalidInputError,
    NotFoundError,
    QueuedCapError,
    StoreUnavailableError,
)
from jobrail.limits.model import LimitsUnavailableError

log = logging.getLogger("jobrail.api")


class ErrorDetail(BaseModel):
    code: str
    message: str
    details: list[dict[str, Any]] = []


class ErrorBody(BaseModel):
    error: ErrorDetail


def error_response(
    status: int,
    code: str,
    message: str,
    details: list[dict[str, Any]] | None = None,
    headers: dict[str, str] | None = None,
) -> JSONResponse:
    body = ErrorBody(error=ErrorDetail(code=code, message=message, details=details or []))
    return JSONResponse(jsonable_encoder(body), status_code=status, headers=headers)


def error_body(code: str, message: str, details: list[dict[str, Any]] | None = None) -> bytes:
    """The JSON error body, for answers sent below FastAPI (ASGI middlewares, the server)."""
    return json.dumps(
        {"error": {"code": code, "message": message, "details": details or []}},
        ensure_ascii=False,
    ).encode()


async def asgi_error(
    send: Send,
    status: int,
    code: str,
    message: str,
    details: list[dict[str, Any]] | None = None,
    *,
    close: bool = False,
) -> None:
    """Answer an HTTP request with a JSON error from an ASGI middleware."""
    body = error_body(code, message, details)
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
    ]
    if close:
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class RequestRefused(StarletteHTTPException):
    """An HTTPException with the error code and details it answers with."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        details: list[dict[str, Any]] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(status, message, headers=headers)
        self.code = code
        self.details = details or []


ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorBody, "description": description}
    for status, description in {
        400: "Bad request",
        401: "No API key, or not a valid one",
        404: "Not found (or another tenant's)",
        409: "Conflicts with the current state",
        422: "Invalid input",
        503: "A backing service is unavailable; retry after Retry-After seconds",
    }.items()
}

ADMIN_ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    **ERROR_RESPONSES,
    403: {"model": ErrorBody, "description": "The API key is not an admin key"},
}

_HTTP_CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    408: "request_timeout",
    413: "payload_too_large",
    415: "unsupported_media_type",
    422: "validation_error",
    431: "headers_too_large",
    429: "rate_limited",
    503: "service_unavailable",
}


_UNAVAILABLE: tuple[tuple[type[Exception], str, str], ...] = (
    (StoreUnavailableError, "database_unavailable", "the database"),
    (BrokerUnavailableError, "broker_unavailable", "the message broker"),
    (LimitsUnavailableError, "limits_unavailable", "the limits store"),
)


Outage = Callable[[BaseException], tuple[str, str] | None]
"""Which backing service an error says is away, as (error code, service), for a
driver's error no adapter named (a context's repository, a route's own call); None
for any other error. The app's composition gives its own (``jobrail.runtime.outages``):
this edge knows no driver."""


def outage_of(app: Any) -> Outage | None:
    """The outage classification ``install_error_handlers`` gave `app`, if any."""
    state = getattr(app, "state", None)
    found = getattr(state, "outage", None)
    return found if callable(found) else None


def error_for(exc: Exception, outage: Outage | None = None) -> JSONResponse | None:
    """The JSON answer to an error jobrail's routes raise, or None for an unexpected one
    (domain errors, a backing service that cannot be reached, invalid requests and
    HTTPExceptions). `outage` names the services of drivers' own errors."""
    if isinstance(exc, DomainError):
        return _domain_error(exc)
    unavailable = _unavailable(exc, outage)
    if unavailable is not None:
        code, what = unavailable
        # A 503 for a backing service that cannot be reached: clients retry after 5 s.
        log.warning("%s unavailable: %s", what.removeprefix("the "), _one_line(exc))
        return error_response(503, code, f"{what} is unavailable", headers={"Retry-After": "5"})
    if isinstance(exc, RequestValidationError):
        return _invalid_request(exc)
    if isinstance(exc, StarletteHTTPException):
        return _http_error(exc)
    return None


def _unavailable(exc: Exception, outage: Outage | None) -> tuple[str, str] | None:
    """The error code and the service, for an error that says a backing service cannot
    be used right now: one an adapter named, or a driver's own that `outage` names.
    Every way a database can be away is a 503, never a 500."""
    for named, code, what in _UNAVAILABLE:
        if isinstance(exc, named):
            return code, what
    return None if outage is None else outage(exc)


def _one_line(exc: Exception) -> str:
    """What the log says of an outage: the error's first line (an adapter's names the
    driver's error alone; a driver's own may go on with a statement)."""
    text = str(exc)
    return f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}"


def _domain_error(exc: DomainError) -> JSONResponse:
    if isinstance(exc, QueuedCapError):
        # Nothing says when a queued job starts: look again in a few seconds.
        details = [{"cap": exc.cap}]
        return error_response(429, "queued_cap", str(exc), details, {"Retry-After": "5"})
    if isinstance(exc, NotFoundError):
        return error_response(404, "not_found", str(exc))
    if isinstance(exc, ConflictError):
        return error_response(409, "conflict", str(exc))
    if isinstance(exc, InvalidInputError):
        return error_response(422, "invalid_input", str(exc), exc.details)
    return error_response(422, "rule_violated", str(exc))


def _invalid_request(exc: RequestValidationError) -> JSONResponse:
    details: list[dict[str, Any]] = []
    for error in exc.errors():
        detail = {
            "loc": list(error.get("loc", ())),
            "msg": error.get("msg", ""),
            "type": error.get("type", ""),
        }
        # Each once: FastAPI reports a dependency's missing header once for every place
        # that depends on it (a route's rate limit and its endpoint both take the tenant).
        if detail not in details:
            details.append(detail)
    return error_response(422, "validation_error", "the request is invalid", details)


def _http_error(exc: StarletteHTTPException) -> JSONResponse:
    code = _HTTP_CODES.get(exc.status_code, "http_error")
    message = exc.detail if isinstance(exc.detail, str) else code.replace("_", " ")
    headers = dict(exc.headers) if exc.headers else None
    if isinstance(exc, RequestRefused):
        return error_response(exc.status_code, exc.code, message, exc.details, headers)
    return error_response(exc.status_code, code, message, headers=headers)


async def _mapped(request: Request, exc: Exception) -> Response:
    if isinstance(exc, StarletteHTTPException) and exc.status_code == 405:
        return _not_allowed(request)
    response = error_for(exc, outage_of(request.app))
    assert response is not None  # registered only for the types error_for maps
    return response


def _not_allowed(request: Request) -> Response:
    """A method the path has no route for: 405 with every method its routes take in
    ``Allow``. Starlette names only the first route the path matched (``/webhooks``
    said POST, not GET), and never HEAD, which every GET route answers
    (jobrail.http.guard). OPTIONS asks for just that list: 204."""
    methods = {"OPTIONS"}
    for route in request.app.router.routes:
        if isinstance(route, BaseRoute) and route.matches(request.scope)[0] is not Match.NONE:
            methods |= set(getattr(route, "methods", None) or ())
    if "GET" in methods:
        methods.add("HEAD")
    allow = ", ".join(sorted(methods))
    if request.method == "OPTIONS":
        return Response(status_code=204, headers={"Allow": allow})
    message = f"{request.method} is not allowed here: use {allow}"
    return error_response(405, "method_not_allowed", message, headers={"Allow": allow})


def install_error_handlers(app: FastAPI, outage: Outage | None = None) -> None:
    """Every error as JSON; `outage` names the services of drivers' own errors (a 503)."""
    app.state.outage = outage
    kinds: list[type[Exception]] = [
        DomainError,
        *(unavailable for unavailable, _, _ in _UNAVAILABLE),
        RequestValidationError,
        StarletteHTTPException,
    ]
    for kind in kinds:
        app.add_exception_handler(kind, _mapped)

    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception) -> JSONResponse:
        return unexpected_error(request, exc)


def unexpected_error(request: Request, exc: Exception) -> JSONResponse:
    """The answer to an error no handler took: a 503 for a backing service that cannot be
    used (a driver's error no adapter named), else a logged 500."""
    response = error_for(exc, outage_of(request.app))
    if response is not None:
        return response
    log.exception("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
    return error_response(500, "internal_error", "internal error")


class JsonErrorsRoute(APIRoute):
    """A route whose errors are JSON whatever app serves it: the errors ``error_for``
    maps are answered by the route itself, so a host app that installed none of
    jobrail's error handlers answers them as jobrail's app does. With ``catch_all``
    (``JobRail.router``'s routes), an unexpected error is a logged JSON 500 too."""

    catch_all = False
    outage: Outage | None = None
    """What names drivers' errors where the app does not (a host's)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()
        catch_all = self.catch_all
        own = type(self).outage

        async def answer(request: Request) -> Response:
            try:
                return await handler(request)
            except Exception as exc:
                response = error_for(exc, outage_of(request.app) or own)
                if response is not None:
                    return response
                if catch_all:
                    return unexpected_error(request, exc)
                raise

        return answer


class JsonCORSMiddleware(CORSMiddleware):
    """Starlette's CORS middleware, whose refusal of a preflight is plain text: JSON here."""

    def preflight_response(self, request_headers: Any) -> Response:
        response = super().preflight_response(request_headers)
        if response.status_code < 400:
            return response
        message = bytes(response.body).decode(errors="replace")
        headers = {
            name: value
            for name, value in response.headers.items()
            if name.lower() not in {"content-type", "content-length"}
        }
        return JSONResponse(
            json.loads(error_body("cors_refused", message)),
            status_code=response.status_code,
            headers=headers,
        )
