"""The README's run command: `make run` serves the embedded mode with no services."""

import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from tests.support.processes import ROOT, Process
from tests.support.servers import free_port

# The embedded mode seeds the tenant "demo" with this key (JOBRAIL_DEMO_API_KEY).
DEMO = {"Authorization": "Bearer demo-key"}


@pytest.fixture(scope="module")
def embedded_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Process]]:
    port = free_port()
    tmp_path = tmp_path_factory.mktemp("run")
    server = Process(
        ["make", "--no-print-directory", "-C", str(ROOT), "run"],
        {
            "JOBRAIL_API__PORT": str(port),
            "JOBRAIL_DATABASE__URL": f"sqlite+aiosqlite:///{tmp_path}/run.db",
            "JOBRAIL_SYNC__VENDOR_BASE_URL": f"http://127.0.0.1:{port}/sandbox/vendor",
        },
        name="make-run",
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        assert server.alive(), server.output()[-3000:]
        try:
            if httpx.get(f"{base}/health", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            time.sleep(0.2)
    else:
        server.stop()
        raise AssertionError(f"make run did not serve:\n{server.output()[-3000:]}")
    yield base, server
    server.stop()


def test_make_run_prints_the_demo_key_and_wants_it(embedded_server: tuple[str, Process]) -> None:
    base, server = embedded_server

    anonymous = httpx.post(f"{base}/demo/echo", json={"message": "hello"}, timeout=5)

    assert "tenant 'demo', API key 'demo-key'" in server.output()
    assert anonymous.status_code == 401
    assert anonymous.json()["error"]["code"] == "unauthorized"


def test_make_run_echoes_a_job_within_two_seconds(embedded_server: tuple[str, Process]) -> None:
    base, _ = embedded_server

    accepted = httpx.post(f"{base}/demo/echo", headers=DEMO, json={"message": "hello"}, timeout=5)
    assert accepted.status_code == 202
    job_id = accepted.json()["job_id"]

    deadline = time.monotonic() + 2
    job = httpx.get(f"{base}/jobs/{job_id}", headers=DEMO, timeout=5).json()
    while job["status"] != "succeeded" and time.monotonic() < deadline:
        time.sleep(0.05)
        job = httpx.get(f"{base}/jobs/{job_id}", headers=DEMO, timeout=5).json()

    assert job["status"] == "succeeded", job
    assert job["result"] == {"echo": "hello"}
    ready = httpx.get(f"{base}/ready", timeout=5)
    assert ready.json() == {"status": "ready", "checks": {"database": "ok", "broker": "ok"}}


def _wait(base: str, path: str, done: Callable[[dict[str, Any]], bool], timeout: float = 10) -> Any:
    deadline = time.monotonic() + timeout
    body = httpx.get(f"{base}{path}", headers=DEMO, timeout=5).json()
    while not done(body) and time.monotonic() < deadline:
        time.sleep(0.1)
        body = httpx.get(f"{base}{path}", headers=DEMO, timeout=5).json()
    assert done(body), body
    return body


def test_make_run_shows_billing_notifications_and_sync_working(
    embedded_server: tuple[str, Process],
) -> None:
    base, _ = embedded_server
    invoice = httpx.post(
        f"{base}/billing/invoices",
        headers=DEMO,
        json={
            "customer_id": "c-1",
            "customer_email": "ada@example.com",
            "currency": "EUR",
            "lines": [{"description": "Plan", "quantity": 1, "unit_price_minor": 4900}],
        },
        timeout=5,
    ).json()
    assert (
        httpx.post(
            f"{base}/billing/invoices/{invoice['id']}/issue", headers=DEMO, timeout=5
        ).status_code
        == 200
    )
    paid = httpx.post(
        f"{base}/billing/invoices/{invoice['id']}/pay", headers=DEMO, timeout=5
    ).json()
    assert paid["status"] == "paid"

    sent = _wait(
        base,
        f"/notifications?invoice_id={invoice['id']}",
        lambda body: bool(body["items"]) and body["items"][0]["status"] == "sent",
    )
    assert sent["items"][0]["recipient"] == "ada@example.com"

    accepted = httpx.post(f"{base}/sync/accounts/demo-pages-4/sync", headers=DEMO, timeout=5)
    assert accepted.status_code == 202
    job = _wait(
        base, f"/jobs/{accepted.json()['job_id']}", lambda body: body["status"] == "succeeded"
    )
    assert job["result"]["items_synced"] == 40
    account = httpx.get(f"{base}/sync/accounts/demo-pages-4", headers=DEMO, timeout=5).json()
    assert account["status"] == "synced"
