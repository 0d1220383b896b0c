"""Every error leaves the API as JSON: ``{"error": {"code", "message", "details"}}``."""

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from starlette.exceptions import HTTPException as StarletteHTTPException

from jobrail.jobs.ports import BrokerUnavailableError, StoreUnavailableError
from jobrail.kernel.errors import ConflictError, DomainError, InvalidInputError, NotFoundError
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
    413: "payload_too_large",
    415: "unsupported_media_type",
    429: "rate_limited",
    503: "service_unavailable",
}


def _unavailable(code: str, what: str) -> Any:
    """A 503 for a backing service that cannot be reached: clients retry after 5 s."""

    async def handler(_request: Request, exc: Exception) -> JSONResponse:
        log.warning("%s unavailable: %s", what.removeprefix("the "), exc)
        return error_response(503, code, f"{what} is unavailable", headers={"Retry-After": "5"})

    return handler


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(DomainError)
    async def domain_error(_request: Request, exc: DomainError) -> JSONResponse:
        if isinstance(exc, NotFoundError):
            return error_response(404, "not_found", str(exc))
        if isinstance(exc, ConflictError):
            return error_response(409, "conflict", str(exc))
        if isinstance(exc, InvalidInputError):
            return error_response(422, "invalid_input", str(exc), exc.details)
        return error_response(422, "rule_violated", str(exc))

    for unavailable, code, what in (
        (StoreUnavailableError, "database_unavailable", "the database"),
        (BrokerUnavailableError, "broker_unavailable", "the message broker"),
        (LimitsUnavailableError, "limits_unavailable", "the limits store"),
    ):
        app.add_exception_handler(unavailable, _unavailable(code, what))

    @app.exception_handler(RequestValidationError)
    async def invalid_request(_request: Request, exc: RequestValidationError) -> JSONResponse:
        details = [
            {
                "loc": list(error.get("loc", ())),
                "msg": error.get("msg", ""),
                "type": error.get("type", ""),
            }
            for error in exc.errors()
        ]
        return error_response(422, "validation_error", "the request is invalid", details)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = _HTTP_CODES.get(exc.status_code, "http_error")
        message = exc.detail if isinstance(exc.detail, str) else code.replace("_", " ")
        headers = dict(exc.headers) if exc.headers else None
        return error_response(exc.status_code, code, message, headers=headers)

    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return error_response(500, "internal_error", "internal error")
