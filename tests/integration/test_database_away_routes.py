"""Every route that needs the database answers 503 with Retry-After while it is away,
never a 500: jobrail's routes (jobs, batches and chains, events, webhooks, admin, the ops
pages) and the reference contexts' (billing, sync, notifications).

The API reaches Postgres through this test's own proxy, which then drops every
connection (a statement in flight, or the next one on a pooled connection, meets a
reset) and refuses new ones: Postgres itself is not touched (tests/faults stop it for
real, shutting down and refusing). The clients' keys were looked up before, so each
request gets past authentication to its route's own use of the database.
"""

import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from jobrail.settings import Settings
from tests.support.fixtures import ApiClient, settings_from
from tests.support.rabbit import RabbitProbe
from tests.support.tcp_proxy import TcpProxy

ID = str(uuid.uuid4())
INVOICE = {
    "customer_id": "c-1",
    "customer_email": "ada@example.com",
    "currency": "EUR",
    "lines": [{"description": "Plan", "quantity": 1, "unit_price_minor": 100}],
}


class Form(dict[str, str]):
    """A body the console's forms post (form-encoded, not JSON)."""

    def __init__(self, **fields: str) -> None:
        super().__init__(fields)


# (method, path, JSON body or Form, admin key): one or more routes of every family.
ROUTES: list[tuple[str, str, Any, bool]] = [
    ("GET", f"/jobs/{ID}", None, False),
    ("GET", "/jobs", None, False),
    ("POST", "/jobs", {"type": "demo.echo", "payload": {"message": "m"}}, False),
    ("POST", f"/jobs/{ID}/cancel", None, False),
    ("POST", "/jobs/bulk/cancel", {"type": "demo.echo"}, False),
    ("POST", f"/jobs/{ID}/redrive", None, True),
    ("POST", "/demo/echo", {"message": "m"}, False),
    ("POST", "/demo/batch", {"count": 2}, False),
    ("GET", f"/batches/{ID}", None, False),
    ("POST", f"/batches/{ID}/cancel", None, False),
    ("GET", f"/chains/{ID}", None, False),
    ("POST", f"/chains/{ID}/cancel", None, False),
    ("GET", "/events", None, False),
    ("GET", f"/jobs/{ID}/events", None, False),
    ("POST", "/webhooks", {"url": "https://hooks.example.com/x"}, False),
    ("GET", "/webhooks", None, False),
    ("GET", f"/webhooks/{ID}", None, False),
    ("DELETE", f"/webhooks/{ID}", None, False),
    ("GET", "/admin/overview", None, True),
    ("PUT", "/admin/tenants/acme/max-queued", {"max_queued": 5}, True),
    ("PUT", "/admin/tenants/acme/weight", {"weight": 2}, True),
    ("POST", "/admin/pauses", {"scope": "tenant", "value": "acme"}, True),
    ("GET", "/admin/pauses", None, True),
    ("DELETE", "/admin/pauses/tenant/acme", None, True),
    ("GET", "/admin/workers", None, True),
    ("POST", "/admin/jobs/bulk/cancel", {"type": "demo.echo"}, True),
    ("GET", "/ops", None, True),
    ("GET", f"/ops/jobs/{ID}", None, True),
    ("GET", f"/ops/flows/{ID}", None, True),
    ("GET", "/ops/jobs", None, True),
    ("POST", f"/ops/jobs/{ID}/redrive", Form(confirm="yes"), True),
    ("POST", f"/ops/jobs/{ID}/cancel", Form(confirm="yes"), True),
    ("GET", "/ops/queues", None, True),
    ("GET", "/ops/workers", None, True),
    ("GET", "/ops/schedules", None, True),
    ("POST", "/ops/bulk/{action}", Form(type="demo.echo"), True),
    (
        "POST",
        "/ops/queues/{action}",
        Form(confirm="yes", scope="queue", value="jobs.default"),
        True,
    ),
    ("POST", "/billing/invoices", INVOICE, False),
    ("GET", "/billing/invoices", None, False),
    ("GET", f"/billing/invoices/{ID}", None, False),
    ("POST", f"/billing/invoices/{ID}/issue", None, False),
    ("POST", f"/billing/invoices/{ID}/pay", None, False),
    ("POST", f"/billing/invoices/{ID}/void", None, False),
    ("POST", "/billing/month-end-runs", {"month": "2026-01", "report_to": "f@example.com"}, False),
    ("GET", "/billing/month-end-runs/2026-01", None, False),
    ("GET", "/notifications", None, False),
    ("POST", "/sync/accounts/shop-1/sync", None, False),
    ("GET", "/sync/accounts/shop-1", None, False),
]
# Routes that do not use the database: the broker's (admin queues and dead letters, the
# console's dead-letter page, whose redrive reaches the database only for a letter),
# the limits store's (the admin API's, and the console's limits page and its reset), the
# process's own and the sandbox vendor's; and the ops sign-in form's, which a browser
# posts with its CSRF cookie (tests/api/test_ops_session.py).
ELSEWHERE = (
    "/health",
    "/ready",
    "/metrics",
    "/admin/queues",
    "/admin/dlq",
    "/admin/limits",
    "/ops/limits",
    "/ops/login",
    "/ops/logout",
    "/ops/dlq",
    "/ops/static",
)


def filled(path: str) -> str:
    """A route's path with its {action} named: a bulk action or a queue's."""
    return path.replace("{action}", "cancel" if "/bulk/" in path else "pause")


@pytest.fixture
async def proxied_api(
    stack_env: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
    make_api: Callable[[Settings], Any],
    rabbit: RabbitProbe,
) -> AsyncIterator[tuple[ApiClient, TcpProxy]]:
    async with TcpProxy(5432) as proxy:
        url = stack_env["JOBRAIL_DATABASE__URL"].replace(
            "127.0.0.1:5432", f"127.0.0.1:{proxy.port}"
        )
        settings = settings_from({**stack_env, "JOBRAIL_DATABASE__URL": url}, monkeypatch)
        async with make_api(settings) as client:
            yield client, proxy


def test_the_table_names_every_route_that_uses_the_database() -> None:
    """A route added later is added here too, or this fails."""
    from jobrail.runtime.app import create_app
    from tests.support.apps import REFERENCE

    app = create_app(Settings(mode="embedded", environment="test"), modules=REFERENCE)
    listed = {(method, _shape(path)) for method, path, _, _ in ROUTES}
    missing = [
        (method, route.path)
        for route in app.routes
        if hasattr(route, "methods") and not route.path.startswith(ELSEWHERE)
        for method in route.methods - {"HEAD"}
        if not route.path.startswith("/sandbox/") and (method, route.path) not in listed
    ]
    assert missing == []


def _shape(path: str) -> str:
    """`path` as its route writes it (the ids of this table named as its parameters)."""
    shapes = {
        f"/jobs/{ID}": "/jobs/{job_id}",
        f"/batches/{ID}": "/batches/{batch_id}",
        f"/chains/{ID}": "/chains/{chain_id}",
        f"/webhooks/{ID}": "/webhooks/{webhook_id}",
        f"/ops/jobs/{ID}": "/ops/jobs/{job_id}",
        f"/ops/flows/{ID}": "/ops/flows/{flow_id}",
        f"/billing/invoices/{ID}": "/billing/invoices/{invoice_id}",
        "/billing/month-end-runs/2026-01": "/billing/month-end-runs/{month}",
        "/sync/accounts/shop-1": "/sync/accounts/{account_id}",
        "/admin/tenants/acme": "/admin/tenants/{tenant_id}",
        "/admin/pauses/tenant/acme": "/admin/pauses/{scope}/{value}",
    }
    for concrete, shape in shapes.items():
        if path.startswith(concrete):
            return shape + path.removeprefix(concrete)
    return path


async def test_every_route_answers_503_while_the_database_is_away(
    proxied_api: tuple[ApiClient, TcpProxy],
) -> None:
    api, proxy = proxied_api
    admin = await api.auth("ops-admin", admin=True)
    # Both keys are looked up (and kept) while the database answers.
    assert (await api.get("/jobs")).status_code == 200
    assert (await api.get("/jobs", headers=admin)).status_code == 200

    await proxy.take_down()
    answers = {}
    for method, path, body, as_admin in ROUTES:
        sent = {"data": body} if isinstance(body, Form) else {"json": body}
        path = filled(path)
        response = await api.request(method, path, headers=admin if as_admin else None, **sent)
        answers[(method, path)] = (response.status_code, response.headers.get("Retry-After"))
        if response.status_code == 503 and not path.startswith("/ops"):
            assert response.json()["error"]["code"] == "database_unavailable", response.text
    assert {route: answer for route, answer in answers.items() if answer != (503, "5")} == {}
    assert (await api.get("/health")).status_code == 200
    assert (await api.get("/ready")).status_code == 503

    await proxy.accept()
    assert (await api.get("/jobs")).status_code == 200  # and back, on new connections
