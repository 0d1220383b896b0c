"""Bad input is a clear JSON 4xx, never a 500 (issue 11, security item 4)."""

import base64
import json
import uuid
from typing import Any

import pytest

from tests.support.apps import REFERENCE
from tests.support.fixtures import ApiClient

INVOICE: dict[str, Any] = {
    "customer_id": "c-1",
    "customer_email": "ada@example.com",
    "currency": "EUR",
    "lines": [{"description": "plan", "quantity": 1, "unit_price_minor": 1200}],
}


def _cursor(raw: str) -> str:
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def _is_422(response: Any) -> bool:
    return bool(
        response.status_code == 422
        and response.headers["content-type"].startswith("application/json")
        and response.json()["error"]["code"] in {"invalid_input", "validation_error"}
        and response.headers.get("X-Request-Id")
    )


@pytest.mark.parametrize(
    "raw",
    [
        # From the issue: a naive timestamp (the API only gives out UTC ones).
        "2026-12-01T05:52:48|00000000-0000-0000-0000-000000000000",
        "0001-01-01T00:00:00+00:00|00000000-0000-0000-0000-000000000000",
        "9999-12-31T23:59:59+00:00|00000000-0000-0000-0000-000000000000",
        "9999-12-31T23:59:59-14:00|00000000-0000-0000-0000-000000000000",
        "2026-12-01T05:52:48+00:00|not-a-uuid",
        "2026-12-01T05:52:48+00:00",
    ],
)
async def test_a_tampered_cursor_is_a_422(api: ApiClient, raw: str) -> None:
    response = await api.get("/jobs", params={"cursor": _cursor(raw)})

    assert _is_422(response), response.text


async def test_a_cursor_the_api_gave_out_still_pages(api: ApiClient) -> None:
    for _ in range(3):
        await api.echo()
    first = (await api.get("/jobs", params={"limit": 2})).json()
    second = await api.get("/jobs", params={"limit": 2, "cursor": first["next_cursor"]})

    assert second.status_code == 200, second.text
    assert len(second.json()["items"]) == 1


@pytest.mark.parametrize("value", ["yes", "true", 1, 0, "false", None])
async def test_booleans_of_a_body_are_json_booleans_only(api: ApiClient, value: object) -> None:
    echo = await api.post("/demo/echo", json={"message": "m", "permanent": value})
    invoice = await api.post("/billing/invoices", json={**INVOICE, "auto_pay": value})

    assert _is_422(echo), echo.text
    assert _is_422(invoice), invoice.text
    listed = (await api.get("/jobs")).json()["items"]
    assert listed == []


async def test_numbers_of_a_body_are_not_taken_from_strings(api: ApiClient) -> None:
    response = await api.post("/demo/echo", json={"message": "m", "sleep_ms": "5"})

    assert _is_422(response), response.text


async def test_a_real_boolean_is_still_taken(api: ApiClient) -> None:
    response = await api.post("/demo/echo", json={"message": "m", "permanent": True})

    assert response.status_code == 202, response.text
    job = await api.wait_status(response.json()["job_id"], "failed", timeout=10)
    assert "permanent" in job["last_error"]


async def _raw_asgi(api: ApiClient, method: str, path: str) -> tuple[int, dict[str, str], Any]:
    """Call the app with `path` exactly as given: httpx (and browsers) remove "." and
    ".." segments before sending, but a raw client or a proxy need not."""
    messages: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        messages.append(message)

    scope = {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [
            (b"host", b"api"),
            (b"authorization", api.headers["Authorization"].encode()),
        ],
        "client": ("127.0.0.1", 50000),
        "server": ("api", 80),
    }
    await api.app(scope, receive, send)
    start = messages[0]
    headers = {k.decode().lower(): v.decode() for k, v in start["headers"]}
    body = b"".join(m.get("body", b"") for m in messages[1:])
    return start["status"], headers, json.loads(body)


@pytest.mark.parametrize("account_id", [".", "..", ".hidden", "-x"])
async def test_an_account_id_that_is_a_path_segment_of_its_own_is_refused(
    api: ApiClient, account_id: str
) -> None:
    path = f"/sync/accounts/{account_id}"
    for method, target in (("POST", path + "/sync"), ("GET", path)):
        status, headers, body = await _raw_asgi(api, method, target)

        assert status == 422, (method, target, body)
        assert headers["content-type"].startswith("application/json")
        assert body["error"]["code"] in {"invalid_input", "validation_error"}
        assert headers["x-request-id"]
    assert (await api.get("/jobs")).json()["items"] == []


async def test_an_account_id_with_dots_inside_is_still_an_account(api: ApiClient) -> None:
    response = await api.post("/sync/accounts/acme.eu-1/sync")

    assert response.status_code == 202, response.text


async def test_a_job_id_that_is_not_a_uuid_is_a_422(api: ApiClient) -> None:
    response = await api.get(f"/jobs/{uuid.uuid4().hex}x")

    assert _is_422(response), response.text


@pytest.mark.parametrize("body", [{"all": "yes"}, {"all": 1}, {"all": "true"}])
async def test_redriving_the_whole_dead_letter_queue_needs_a_json_true(
    api: ApiClient, body: dict[str, object]
) -> None:
    admin = await api.auth("ops", admin=True)

    response = await api.post("/admin/dlq/redrive", json=body, headers=admin)

    assert _is_422(response), response.text


ENQUEUE_BODIES: dict[str, dict[str, Any]] = {
    "/demo/echo": {"message": "x"},
    "/demo/batch": {"count": 1},
    "/jobs": {"type": "demo.echo", "payload": {"message": "x"}},
}
"""The routes that take an Idempotency-Key, each with a body it takes."""


NUL_BODIES: list[tuple[str, dict[str, Any]]] = [
    ("/demo/echo", {"message": "a\u0000b"}),
    ("/billing/invoices", {**INVOICE, "customer_id": "c\u00001"}),
    (
        "/billing/invoices",
        {**INVOICE, "lines": [{"description": "p\u0000", "quantity": 1, "unit_price_minor": 1}]},
    ),
]


async def assert_nul_refused(api: ApiClient) -> None:
    """Shared with the Postgres-mode test (tests/integration/test_bad_input_pg.py)."""
    for path, body in NUL_BODIES:
        response = await api.post(path, json=body)
        assert _is_422(response), (path, response.text)
        assert response.json()["error"]["details"][0]["type"] == "nul_character"
    escaped_nul = b'{"message": "a\\u0000b"}'
    response = await api.post(
        "/demo/echo", content=escaped_nul, headers={"content-type": "application/json"}
    )
    assert _is_422(response), response.text
    for params in ({"type": "a\u0000"}, {"entity_id": "\u0000"}, {"cursor": "x\u0000"}):
        response = await api.get("/jobs", params=params)
        assert _is_422(response), (params, response.text)
    for path in ("/sync/accounts/a%00b", "/sync/accounts/a%00b/sync", "/jobs/%00"):
        method = "POST" if path.endswith("/sync") else "GET"
        response = await api.send(api.build_request(method, path))
        assert _is_422(response), (path, response.text)
    # Nothing was half-written.
    assert (await api.get("/jobs")).json()["items"] == []
    assert (await api.get("/billing/invoices")).json()["items"] == []


async def test_a_nul_character_anywhere_in_a_request_is_a_422(api: ApiClient) -> None:
    await assert_nul_refused(api)


async def test_an_escaped_backslash_before_u0000_is_text_not_nul(api: ApiClient) -> None:
    # JSON "a\\u0000b" is the six characters \u0000 between a and b, not a NUL.
    response = await api.post(
        "/demo/echo",
        content=b'{"message": "a\\\\u0000b"}',
        headers={"content-type": "application/json"},
    )

    assert response.status_code == 202, response.text
    job = await api.wait_status(response.json()["job_id"], "succeeded", timeout=10)
    assert job["result"] == {"echo": "a\\u0000b"}


async def test_an_unexpected_error_is_a_json_500_with_the_request_id(api: ApiClient) -> None:
    async def boom() -> None:
        raise RuntimeError("boom")

    api.app.add_api_route("/test-boom", boom)

    response = await api.get("/test-boom", headers={"X-Request-Id": "req-500"})
    after = await api.get("/health")

    assert response.status_code == 500
    assert response.json()["error"]["code"] == "internal_error"
    assert "boom" not in response.text
    assert response.headers["X-Request-Id"] == "req-500"
    assert after.status_code == 200


async def test_a_refused_cors_preflight_is_json_with_the_request_id(tmp_path: Any) -> None:
    import httpx

    from jobrail.runtime.app import create_app
    from tests.api.conftest import embedded_settings, migrated

    settings = await migrated(embedded_settings(tmp_path, api={"cors_origins": ["https://ok"]}))
    app = create_app(settings, modules=REFERENCE)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://api") as c,
    ):
        refused = await c.options(
            "/jobs",
            headers={"Origin": "https://evil", "Access-Control-Request-Method": "GET"},
        )
        allowed = await c.options(
            "/jobs", headers={"Origin": "https://ok", "Access-Control-Request-Method": "GET"}
        )

    assert refused.status_code == 400
    assert refused.headers["content-type"] == "application/json"
    assert refused.json()["error"]["code"] == "cors_refused"
    assert "origin" in refused.json()["error"]["message"]
    assert refused.headers["X-Request-Id"]
    assert allowed.status_code == 200
    assert allowed.headers["access-control-allow-origin"] == "https://ok"


async def test_a_500_to_an_allowed_origin_carries_the_cors_headers(tmp_path: Any) -> None:
    # Without them the browser hides the answer, request id and all, from the page.
    import httpx

    from jobrail.runtime.app import create_app
    from tests.api.conftest import embedded_settings, migrated

    settings = await migrated(embedded_settings(tmp_path, api={"cors_origins": ["https://ok"]}))
    app = create_app(settings, modules=REFERENCE)

    async def boom() -> None:
        raise RuntimeError("boom")

    app.add_api_route("/test-boom", boom)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://api") as c,
    ):
        response = await c.get(
            "/test-boom", headers={"Origin": "https://ok", "X-Request-Id": "req-cors-500"}
        )

    assert response.status_code == 500
    assert response.json()["error"]["code"] == "internal_error"
    assert response.headers["access-control-allow-origin"] == "https://ok"
    assert "X-Request-Id" in response.headers["access-control-expose-headers"]
    assert response.headers["X-Request-Id"] == "req-cors-500"


@pytest.mark.parametrize("path", list(ENQUEUE_BODIES))
async def test_an_idempotency_key_past_255_characters_is_a_422_that_names_the_header(
    api: ApiClient, path: str
) -> None:
    body = ENQUEUE_BODIES[path]
    too_long = await api.post(path, json=body, headers={"Idempotency-Key": "k" * 256})
    longest = await api.post(path, json=body, headers={"Idempotency-Key": "k" * 255})

    assert _is_422(too_long), too_long.text
    [detail] = too_long.json()["error"]["details"]
    assert (detail["loc"], detail["type"]) == (["header", "Idempotency-Key"], "string_too_long")
    assert longest.status_code == 202, longest.text


@pytest.mark.parametrize("path", list(ENQUEUE_BODIES))
async def test_an_empty_idempotency_key_is_a_422_not_a_key_every_request_shares(
    api: ApiClient, path: str
) -> None:
    # A client whose variable for the key is unset sends the header empty: taken as a
    # key, every request after its first was replayed as the first.
    body = ENQUEUE_BODIES[path]
    for empty in ("", "   "):
        refused = await api.post(path, json=body, headers={"Idempotency-Key": empty})

        assert _is_422(refused), refused.text
        [detail] = refused.json()["error"]["details"]
        assert (detail["loc"], detail["type"]) == (
            ["header", "Idempotency-Key"],
            "string_too_short",
        )
    assert (await api.get("/jobs")).json()["items"] == []


@pytest.mark.parametrize("path", list(ENQUEUE_BODIES))
async def test_the_openapi_schema_documents_the_idempotency_key_header(
    api: ApiClient, path: str
) -> None:
    operation = api.app.openapi()["paths"][path]["post"]
    [header] = [p for p in operation["parameters"] if p["in"] == "header"]

    assert (header["name"], header["required"]) == ("Idempotency-Key", False)
    assert {"type": "string", "minLength": 1, "maxLength": 255} in header["schema"]["anyOf"]


async def test_a_path_with_a_trailing_slash_is_a_404_not_a_redirect_to_the_host_header(
    api: ApiClient,
) -> None:
    # A redirect would be built from the request's Host header: a cache in front of the
    # API could then keep a redirect to any host a client names.
    response = await api.get("/jobs/", headers={"Host": "elsewhere.example"})

    assert response.status_code == 404
    assert "location" not in response.headers
    assert "not found" in response.json()["error"]["message"].lower()
