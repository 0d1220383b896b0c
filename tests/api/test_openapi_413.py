"""The OpenAPI document says what the API answers: every operation that takes a request
body may be refused with 413 (api.max_body_bytes, before any route runs), with the same
JSON error body as every other error."""

from pathlib import Path
from typing import Any

import httpx

from jobrail.runtime.app import create_app
from tests.api.conftest import embedded_settings, migrated
from tests.support.apps import REFERENCE
from tests.support.fixtures import ApiClient


async def test_every_operation_with_a_request_body_documents_the_413(tmp_path: Path) -> None:
    settings = embedded_settings(tmp_path, api={"docs": True, "max_body_bytes": 1024})
    app = create_app(await migrated(settings), modules=REFERENCE)
    client = ApiClient(transport=httpx.ASGITransport(app=app), base_url="http://api")
    client.app = app
    async with app.router.lifespan_context(app), client:
        document: dict[str, Any] = (await client.get("/openapi.json")).json()
        api = client.sign_in_with("demo", "demo-key")
        refused = await api.post(
            "/demo/echo", json={"message": "x" * 2000}, headers={"Idempotency-Key": "k-1"}
        )

    with_body = {
        f"{method.upper()} {path}": operation
        for path, item in document["paths"].items()
        for method, operation in item.items()
        if "requestBody" in operation
    }
    assert {"POST /demo/echo", "POST /webhooks", "POST /billing/invoices"} <= set(with_body)
    missing = [name for name, operation in with_body.items() if "413" not in operation["responses"]]
    assert missing == []
    error_body = {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}}
    for operation in with_body.values():
        too_large = operation["responses"]["413"]
        assert too_large["content"] == error_body
        assert "1024 bytes" in too_large["description"]
    assert document["paths"]["/jobs/{job_id}"]["get"]["responses"].get("413") is None
    assert document["components"]["schemas"]["ErrorBody"]["properties"]["error"]
    # What the app answers is what the document says.
    assert refused.status_code == 413
    assert set(refused.json()) == {"error"}
    assert refused.json()["error"]["code"] == "payload_too_large"


async def test_the_413_is_documented_once_however_often_the_document_is_asked_for(
    tmp_path: Path,
) -> None:
    app = create_app(embedded_settings(tmp_path), modules=REFERENCE)

    first = app.openapi()
    again = app.openapi()

    assert again is first
    assert "413" in first["paths"]["/demo/echo"]["post"]["responses"]
