"""Bad input is a clear JSON 4xx, never a 500 (issue 11, security item 4)."""

import base64
import uuid
from typing import Any

import pytest

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


@pytest.mark.parametrize("account_id", [".", "..", ".hidden", "-x"])
async def test_an_account_id_that_is_a_path_segment_of_its_own_is_refused(
    api: ApiClient, account_id: str
) -> None:
    # httpx would resolve "." and ".." itself: send them as they are.
    path = f"/sync/accounts/{account_id}"
    sync = await api.send(api.build_request("POST", path + "/sync"))
    get = await api.send(api.build_request("GET", path))

    for response in (sync, get):
        assert response.status_code in {404, 405, 422}, (account_id, response.text)
        assert response.json()["error"]["code"]
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
