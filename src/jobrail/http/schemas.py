"""What every room's routes share of their requests: the strict request body, and the
Idempotency-Key header as FastAPI would read it."""

from typing import Any

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ConfigDict


class RequestModel(BaseModel):
    """The base of every request body: unknown fields and lax conversions are refused.

    Pydantic's default (lax) mode takes ``"yes"``, ``"true"``, ``1`` or ``"on"`` for a
    boolean and ``"5"`` for a number: ``{"all": "yes"}`` redrove the whole dead-letter
    queue. In strict mode a field takes only the JSON type it declares; FastAPI hands
    request bodies to pydantic as decoded JSON, so nested objects and strings (for
    ``str``, ``EmailStr``, ``Literal``) still validate as usual. A type JSON has no
    literal for (``uuid.UUID``, ``datetime``) must say ``Field(strict=False)``: strict
    mode would take it only as a Python object, and the body has a string.
    """

    model_config = ConfigDict(strict=True, extra="forbid")


IDEMPOTENCY_KEY = "Idempotency-Key"


IDEMPOTENCY_KEY_MAX_LENGTH = 255


# The enqueue routes read the header with `idempotency_key` rather than declare it as a
# FastAPI `Header` parameter: FastAPI's parameter machinery (model lookup, sequence
# checks, a deep copy of the default) was about 3 % of an enqueue's CPU in
# `python -m bench.profile_api`, for a check of length alone. `openapi_extra` documents
# it as FastAPI would have; tests/api/test_bad_input.py holds both to FastAPI's form.
IDEMPOTENCY_KEY_OPENAPI: dict[str, Any] = {
    "parameters": [
        {
            "name": IDEMPOTENCY_KEY,
            "in": "header",
            "required": False,
            "schema": {
                "anyOf": [
                    {
                        "type": "string",
                        "minLength": 1,
                        "maxLength": IDEMPOTENCY_KEY_MAX_LENGTH,
                    },
                    {"type": "null"},
                ],
                "title": IDEMPOTENCY_KEY,
            },
        }
    ]
}


def idempotency_key(request: Request) -> str | None:
    """The request's Idempotency-Key, if any; empty or past its length, the 422 FastAPI's
    own header validation answers. An empty key is refused rather than used: a client
    whose variable for it was unset would otherwise have every request after its first
    replayed."""
    key = request.headers.get(IDEMPOTENCY_KEY)
    if key is not None and not key.strip():
        raise _header_refused(
            key,
            "string_too_short",
            "String should have at least 1 character: send a key, or no header",
            {"min_length": 1},
        )
    if key is not None and len(key) > IDEMPOTENCY_KEY_MAX_LENGTH:
        raise _header_refused(
            key,
            "string_too_long",
            f"String should have at most {IDEMPOTENCY_KEY_MAX_LENGTH} characters",
            {"max_length": IDEMPOTENCY_KEY_MAX_LENGTH},
        )
    return key


def _header_refused(
    key: str, kind: str, message: str, ctx: dict[str, int]
) -> RequestValidationError:
    """The Idempotency-Key's refusal, as FastAPI's own header validation words one."""
    return RequestValidationError(
        [
            {
                "type": kind,
                "loc": ("header", IDEMPOTENCY_KEY),
                "msg": message,
                "input": key,
                "ctx": ctx,
            }
        ]
    )
