"""API keys and tenants: no key, no entry; another tenant's things do not exist."""

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from jobrail.runtime.app import create_app
from jobrail.settings import Settings
from tests.api.conftest import embedded_settings, migrated
from tests.support.apps import REFERENCE
from tests.support.fixtures import ApiClient

INVOICE = {
    "customer_id": "c-1",
    "customer_email": "ada@example.com",
    "currency": "EUR",
    "lines": [{"description": "plan", "quantity": 1, "unit_price_minor": 1200}],
}


@asynccontextmanager
async def _client(settings: Settings) -> AsyncIterator[ApiClient]:
    app = create_app(settings, modules=REFERENCE)
    client = ApiClient(transport=httpx.ASGITransport(app=app), base_url="http://api")
    client.app = app
    async with app.router.lifespan_context(app), client:
        yield client


@pytest.fixture
async def anonymous(tmp_path: Path) -> AsyncIterator[ApiClient]:
    """A client with no key, on an API whose key cache is off (revocation is immediate)."""
    settings = await migrated(embedded_settings(tmp_path, auth={"key_cache_ttl_s": 0}))
    async with _client(settings) as client:
        yield client


def _is_401(response: httpx.Response) -> bool:
    return (
        response.status_code == 401
        and response.json()["error"]["code"] == "unauthorized"
        and response.headers["WWW-Authenticate"] == "Bearer"
    )


async def test_without_a_key_every_product_route_is_a_401_and_health_is_open(
    anonymous: ApiClient,
) -> None:
    job = uuid.uuid4()
    calls = [
        ("GET", "/jobs"),
        ("GET", f"/jobs/{job}"),
        ("POST", f"/jobs/{job}/cancel"),
        ("POST", f"/jobs/{job}/redrive"),
        ("POST", "/demo/echo"),
        ("GET", "/billing/invoices"),
        ("POST", "/billing/invoices"),
        ("GET", "/notifications"),
        ("GET", "/sync/accounts/a-1"),
        ("POST", "/sync/accounts/a-1/sync"),
        ("GET", "/admin/limits/sync.account/lock"),
    ]
    for method, path in calls:
        response = await anonymous.request(method, path, json={} if method == "POST" else None)
        assert _is_401(response), (method, path, response.status_code, response.text)
    wrong_scheme = await anonymous.get("/jobs", headers={"Authorization": "Basic YTpi"})
    assert _is_401(wrong_scheme)
    assert (await anonymous.get("/health")).status_code == 200
    assert (await anonymous.get("/ready")).status_code == 200


async def test_an_unknown_key_is_a_401_and_a_revoked_key_stops_working(
    anonymous: ApiClient,
) -> None:
    from jobrail.runtime.app import runtime_of
    from jobrail.tenants.use_cases import CreateTenant, RevokeApiKey

    container = runtime_of(anonymous.app).container
    issued = await (await container.get(CreateTenant))("acme")
    headers = {"Authorization": f"Bearer {issued.api_key}"}
    assert (await anonymous.get("/jobs", headers=headers)).status_code == 200
    assert _is_401(await anonymous.get("/jobs", headers={"Authorization": "Bearer jr_nope1234"}))
    assert _is_401(await anonymous.get("/jobs", headers={"Authorization": "Bearer short"}))

    await (await container.get(RevokeApiKey))(issued.key_id)

    assert _is_401(await anonymous.get("/jobs", headers=headers))


async def test_the_embedded_mode_seeds_the_demo_tenant_with_an_admin_key(
    anonymous: ApiClient,
) -> None:
    demo = {"Authorization": "Bearer demo-key"}

    job_id = (await anonymous.post("/demo/echo", json={"message": "hi"}, headers=demo)).json()[
        "job_id"
    ]
    limit = await anonymous.get(
        "/admin/limits/sync.account/lock", params={"key": "account:a-1"}, headers=demo
    )

    assert (await anonymous.get(f"/jobs/{job_id}", headers=demo)).status_code == 200
    assert limit.status_code == 200, limit.text
    assert limit.json()["allowed"] is True


async def test_a_changed_demo_key_is_the_one_printed_and_accepted(tmp_path: Path) -> None:
    settings = await migrated(embedded_settings(tmp_path, demo_api_key="let-me-in-please"))
    async with _client(settings) as client:
        ok = await client.get("/jobs", headers={"Authorization": "Bearer let-me-in-please"})
        assert ok.status_code == 200
        assert _is_401(await client.get("/jobs", headers={"Authorization": "Bearer demo-key"}))


async def test_admin_endpoints_are_403_for_a_tenant_key(api: ApiClient) -> None:
    tenant = await api.auth("acme")
    admin = await api.auth("ops", admin=True)
    job_id = await api.echo(headers=tenant, fail_times=3)
    failed = await api.wait_status(job_id, "failed", timeout=5, headers=tenant)

    redrive = await api.post(f"/jobs/{job_id}/redrive", headers=tenant)
    peek = await api.get("/admin/limits/sync.account/lock", params={"key": "k"}, headers=tenant)
    reset = await api.post(
        "/admin/limits/sync.account/lock/reset", params={"key": "k"}, headers=tenant
    )
    assert [r.status_code for r in (redrive, peek, reset)] == [403, 403, 403]
    assert redrive.json()["error"]["code"] == "forbidden"

    # An operator's key redrives any tenant's job; the job stays the tenant's.
    operator = await api.post(f"/jobs/{job_id}/redrive", headers=admin)
    assert operator.status_code == 202
    assert operator.json()["status"] == "pending"
    assert (await api.get(f"/jobs/{job_id}", headers=admin)).status_code == 404
    again = await api.wait_status(job_id, "failed", timeout=5, headers=tenant)
    assert again["finished_at"] > failed["finished_at"]


async def test_another_tenants_invoices_accounts_and_notifications_do_not_exist(
    api: ApiClient,
) -> None:
    acme, globex = await api.auth("acme"), await api.auth("globex")
    invoice = (await api.post("/billing/invoices", json=INVOICE, headers=acme)).json()
    path = f"/billing/invoices/{invoice['id']}"
    assert (await api.post(f"{path}/issue", headers=acme)).status_code == 200
    sync = await api.post("/sync/accounts/shared-name/sync", headers=acme)
    assert sync.status_code == 202

    seen_by_globex: list[tuple[str, Any]] = [
        ("get", (await api.get(path, headers=globex)).status_code),
        ("pay", (await api.post(f"{path}/pay", headers=globex)).status_code),
        ("void", (await api.post(f"{path}/void", headers=globex)).status_code),
        ("list", (await api.get("/billing/invoices", headers=globex)).json()["items"]),
        ("job", (await api.get(f"/jobs/{sync.json()['job_id']}", headers=globex)).status_code),
        (
            "notifications",
            (
                await api.get(
                    "/notifications", params={"invoice_id": invoice["id"]}, headers=globex
                )
            ).json()["items"],
        ),
    ]
    account = await api.get("/sync/accounts/shared-name", headers=globex)

    assert seen_by_globex == [
        ("get", 404),
        ("pay", 404),
        ("void", 404),
        ("list", []),
        ("job", 404),
        ("notifications", []),
    ]
    assert account.status_code == 404
    assert (await api.get("/sync/accounts/shared-name", headers=acme)).status_code == 200
    assert (await api.get(path, headers=acme)).json()["status"] == "issued"


async def test_docs_are_off_outside_development_unless_enabled(tmp_path: Path) -> None:
    for environment, docs, served in [
        ("test", None, False),
        ("production", None, False),
        ("development", None, True),
        ("production", True, True),
    ]:
        settings = embedded_settings(
            tmp_path,
            environment=environment,
            api={"docs": docs} if docs is not None else {},
            # Production refuses the embedded mode; this app is never started.
            **({"mode": "stack"} if environment == "production" else {}),
        )
        app = create_app(settings, modules=REFERENCE)
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://api"
        ) as client:
            schema = await client.get("/openapi.json")
            page = await client.get("/docs")
        assert (schema.status_code == 200) is served, (environment, docs)
        assert (page.status_code == 200) is served, (environment, docs)


async def test_cors_allows_only_the_configured_origins(tmp_path: Path) -> None:
    settings = await migrated(
        embedded_settings(tmp_path, api={"cors_origins": "https://app.example.com"})
    )
    async with _client(settings) as client:
        preflight = {
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "authorization,content-type",
        }
        allowed = await client.options(
            "/demo/echo", headers={"Origin": "https://app.example.com", **preflight}
        )
        refused = await client.options(
            "/demo/echo", headers={"Origin": "https://evil.example.com", **preflight}
        )
        assert allowed.status_code == 200
        assert allowed.headers["access-control-allow-origin"] == "https://app.example.com"
        assert refused.status_code == 400
        assert "access-control-allow-origin" not in refused.headers


async def test_a_body_over_the_limit_is_a_413_and_enqueues_nothing(tmp_path: Path) -> None:
    settings = await migrated(embedded_settings(tmp_path, api={"max_body_bytes": 1024}))
    async with _client(settings) as client:
        client.sign_in_with("demo", "demo-key")
        big = {"message": "x" * 2000}

        declared = await client.post("/demo/echo", json=big)

        async def chunks() -> AsyncIterator[bytes]:
            yield b'{"message": "'
            for _ in range(20):
                yield b"y" * 100
            yield b'"}'

        streamed = await client.post(
            "/demo/echo", content=chunks(), headers={"Content-Type": "application/json"}
        )
        small = await client.post("/demo/echo", json={"message": "fits"})
        listed = (await client.get("/jobs")).json()["items"]

        for response in (declared, streamed):
            assert response.status_code == 413, response.text
            assert response.json()["error"]["code"] == "payload_too_large"
        assert small.status_code == 202
        assert [job["id"] for job in listed] == [small.json()["job_id"]]
