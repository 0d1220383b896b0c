"""Schemathesis against the OpenAPI schema with a valid key: no 5xx, and every 4xx has a
JSON error body ``{"error": {"code": str, "message": str, "details": list}}``.

Every operation of the schema is one test (``test_fuzz[GET /jobs]``, ...), run through the
examples, coverage and fuzzing phases with positive and negative data. Each test gets a fresh
embedded app (its own migrated SQLite file, the in-process worker, API limits off) that
schemathesis calls in-process through its ASGI transport: the transport starts the app's
lifespan on the first request and runs it, and every request, on its own event-loop thread.
The lifespan is stopped when the test ends.
"""

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from fastapi import FastAPI
from hypothesis import settings
from schemathesis.python import asgi

from jobrail.cli.schema import migrate
from jobrail.runtime.app import create_app
from jobrail.settings import Settings
from tests.api.conftest import embedded_settings
from tests.support.apps import REFERENCE

# The embedded app seeds tenant "demo" with this admin key.
VALID_KEY = {"Authorization": "Bearer demo-key"}

MAX_EXAMPLES = 50  # per operation, in the fuzzing phase (the examples and coverage phases add more)
SEED = 20240601


def _settings(directory: Path) -> Settings:
    return embedded_settings(
        directory,
        # Otherwise the fuzz would mostly measure the enqueue limit (30 a minute per tenant).
        api_limits={"enabled": False},
        # Fuzzed demo jobs may sleep for up to an hour: don't wait for them when the app stops.
        worker={"shutdown_grace_s": 0.5},
    )


def _openapi() -> dict[str, Any]:
    """The app's OpenAPI document (docs are off in the test environment, so not over HTTP).

    One addition: the body-size middleware refuses bodies over ``api.max_body_bytes`` (64 KiB)
    with a JSON 413 before any route runs, and the schema allows larger ones (an invoice may have
    500 lines of 500 characters), but no operation documents that 413. It is declared here, with
    the error body, so that ``status_code_conformance`` stays on for every other status and
    ``response_schema_conformance`` checks the 413 body too.
    """
    # An app that is never started: the routes are all the schema needs.
    document = copy.deepcopy(
        create_app(_settings(Path("/nonexistent")), modules=REFERENCE).openapi()
    )
    error_body = {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}}
    for path_item in document["paths"].values():
        for operation in path_item.values():
            if "requestBody" in operation:
                operation["responses"].setdefault(
                    "413", {"description": "Request body too large", "content": error_body}
                )
    return document


class _CurrentApp:
    """The ASGI app the schema is bound to; it forwards to the app of the running test.

    The tests (one per operation) are made from the schema at import time, but each needs an
    app of its own whose lifespan runs for that test only.
    """

    def __init__(self) -> None:
        self.app: FastAPI | None = None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if self.app is None:
            raise RuntimeError("no app to call: the test must use the fuzz_app fixture")
        await self.app(scope, receive, send)


_current = _CurrentApp()

schema = schemathesis.openapi.from_dict(_openapi(), config=schemathesis.Config(seed=SEED))
schema.app = _current
# Every request carries the valid key: schemathesis neither generates nor drops `Authorization`.
# (Its `ignored_auth` check still sends probes without a key and with a wrong one, and expects
# them refused; tests/api/test_auth.py covers the 401s in detail.)
schema.config.generation.update(with_security_parameters=False)
# The default checks stay on (not_a_server_error among them) except these two, which fail on
# behaviour that is intended, or documented, and neither a 5xx nor a 4xx without the JSON body:
schema.config.checks.update(
    excluded_check_names=[
        # 422 for schema-valid input is documented ("Invalid input"): a `cursor` the API did not
        # give out, or a value that breaks a domain rule.
        "positive_data_acceptance",
        # FastAPI validates with pydantic in lax mode, so some schema-violating input is coerced
        # and accepted, e.g. `"permanent": 0` for a boolean in POST /demo/echo.
        "negative_data_rejection",
    ]
)


@pytest.fixture
def fuzz_app(tmp_path: Path) -> Iterator[FastAPI]:
    settings = _settings(tmp_path)
    migrate(settings, REFERENCE)
    _current.app = create_app(settings, modules=REFERENCE)
    try:
        yield _current.app
    finally:
        # Stop the lifespan schemathesis started on the first request. Its pytest plugin does
        # that too after each test; this does not depend on it.
        asgi.shutdown_lifespans()
        _current.app = None


def json_error_body(
    ctx: schemathesis.CheckContext, response: schemathesis.Response, case: schemathesis.Case[Any]
) -> bool | None:
    """Every 4xx is JSON: ``{"error": {"code": str, "message": str, "details": list}}``."""
    if not 400 <= response.status_code < 500:
        return None
    status = response.status_code
    content_type = response.headers.get("content-type", [""])[0]
    assert content_type.startswith("application/json"), (
        f"{status} with Content-Type {content_type!r}: {response.content[:200]!r}"
    )
    try:
        body = response.json()
    except ValueError:
        raise AssertionError(f"{status} body is not JSON: {response.content[:200]!r}") from None
    assert isinstance(body, dict), f"{status} body is not an object: {body!r}"
    assert set(body) == {"error"}, f"{status} body is not {{'error': ...}}: {body!r}"
    error = body["error"]
    assert isinstance(error, dict), f"{status} `error` is not an object: {body!r}"
    assert set(error) == {"code", "message", "details"}, f"{status} `error` keys: {body!r}"
    assert isinstance(error["code"], str), f"{status} `error.code` is not a string: {body!r}"
    assert error["code"], f"{status} `error.code` is empty: {body!r}"
    assert isinstance(error["message"], str), f"{status} `error.message` not a string: {body!r}"
    assert isinstance(error["details"], list), f"{status} `error.details` not a list: {body!r}"
    return None


def valid_key_accepted(
    ctx: schemathesis.CheckContext, response: schemathesis.Response, case: schemathesis.Case[Any]
) -> bool | None:
    """A 401 or 403 means the admin key was not sent or not accepted: the fuzz would then test
    nothing but the auth wall (and every answer would be a well-formed JSON 401)."""
    assert response.status_code not in (401, 403), (
        f"the valid admin key was refused: {response.status_code} {response.text_lossy()[:200]}"
    )
    return None


# Ours, on top of the default checks: run after them on every response.
CHECKS: list[schemathesis.CheckFunction] = [json_error_body, valid_key_accepted]


@schema.parametrize()
@settings(max_examples=MAX_EXAMPLES, derandomize=True, database=None, deadline=None)
# The app runs on schemathesis' event-loop thread, and its background jobs draw from the global
# `random` (lock tokens, jitter) while Hypothesis generates a case on this thread: Hypothesis sees
# the global state change and blames the strategy. Neither the strategies nor this test use it.
@pytest.mark.filterwarnings("ignore:Do not use the `random` module inside strategies")
@pytest.mark.usefixtures("fuzz_app")
def test_fuzz(case: schemathesis.Case[Any]) -> None:
    case.call_and_validate(headers=VALID_KEY, additional_checks=CHECKS)


def _invoice_of(lines: int) -> dict[str, Any]:
    """An invoice of `lines` lines at the largest quantity and unit price the schema allows."""
    line = {"description": "plan", "quantity": 1_000_000, "unit_price_minor": 10**12}
    return {
        "customer_id": "c-1",
        "customer_email": "ada@example.com",
        "currency": "EUR",
        "lines": [line] * lines,
    }


@pytest.mark.usefixtures("fuzz_app")
def test_an_invoice_total_beyond_64_bits_is_a_422_not_a_500() -> None:
    """Found next to the fuzz (it rarely draws many lines at the largest values): each line is
    schema-valid (10**18 at most), but ten of them total 10**19, more than the database's
    64-bit integer holds, and creating the invoice was a 500."""
    create = schema["/billing/invoices"]["POST"]
    largest = create.Case(body=_invoice_of(9), media_type="application/json")
    assert largest.call_and_validate(headers=VALID_KEY, additional_checks=CHECKS).status_code == 201
    too_large = create.Case(body=_invoice_of(10), media_type="application/json")
    response = too_large.call_and_validate(headers=VALID_KEY, additional_checks=CHECKS)
    assert response.status_code == 422
    assert response.json()["error"]["code"] == "validation_error"
