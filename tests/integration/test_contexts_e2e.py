"""The three contexts end to end on the real services, with a real SMTP server and
the sandbox vendor on loopback."""

import asyncio
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from contexts.sync.adapters.persistence import items as sync_items
from jobrail.kernel.ids import JobId
from jobrail.store.tables import jobs
from tests.support.fixtures import ApiClient, settings_from
from tests.support.rabbit import RabbitProbe
from tests.support.servers import RunningSandbox, SmtpSink, sandbox_vendor, smtp_server
from tests.support.services import wait_for
from tests.support.wire import job_envelope


@pytest.fixture
def smtp() -> Iterator[SmtpSink]:
    with smtp_server() as sink:
        yield sink


@pytest.fixture
def vendor() -> Iterator[RunningSandbox]:
    with sandbox_vendor(rate_per_s=50, page_delay_ms=50) as sandbox:
        yield sandbox


@pytest.fixture
def contexts_env(
    stack_env: dict[str, str], smtp: SmtpSink, vendor: RunningSandbox
) -> dict[str, str]:
    return {
        **stack_env,
        "JOBRAIL_NOTIFICATIONS__EMAIL_BACKEND": "smtp",
        "JOBRAIL_NOTIFICATIONS__SMTP_PORT": str(smtp.port),
        "JOBRAIL_SYNC__VENDOR_BASE_URL": vendor.url,
        "JOBRAIL_SYNC__SANDBOX": "false",
    }


@pytest.fixture
def worker_env(contexts_env: dict[str, str]) -> dict[str, str]:
    return contexts_env


@pytest.fixture
async def app(
    contexts_env: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
    make_api: Callable[..., Any],
    rabbit: RabbitProbe,
) -> Any:
    async with make_api(settings_from(contexts_env, monkeypatch)) as api:
        yield api


async def _issued_invoice(api: ApiClient) -> dict[str, Any]:
    created = await api.post(
        "/billing/invoices",
        json={
            "customer_id": "cust-1",
            "customer_email": "buyer@example.com",
            "currency": "EUR",
            "lines": [
                {"description": "Plan", "quantity": 2, "unit_price_minor": 1999},
                {"description": "Setup", "quantity": 1, "unit_price_minor": 500},
            ],
        },
    )
    assert created.status_code == 201, created.text
    invoice = created.json()
    assert invoice["status"] == "draft"
    assert invoice["total_minor"] == 4498
    issued = await api.post(f"/billing/invoices/{invoice['id']}/issue")
    assert issued.status_code == 200
    result: dict[str, Any] = issued.json()
    return result


async def _receipt_jobs(engine: AsyncEngine) -> list[Any]:
    async with engine.connect() as conn:
        return list(
            (
                await conn.execute(
                    select(jobs.c.id, jobs.c.payload, jobs.c.status).where(
                        jobs.c.type == "notifications.send_receipt"
                    )
                )
            ).all()
        )


@pytest.mark.parametrize("entry", ["route", "task"])
async def test_pay_invoice_does_the_same_from_the_route_and_from_the_task(
    entry: str, app: ApiClient, workers: Callable[..., Any], engine: AsyncEngine
) -> None:
    invoice = await _issued_invoice(app)
    if entry == "route":
        response = await app.post(f"/billing/invoices/{invoice['id']}/pay")
        assert response.status_code == 200
    else:
        await workers()
        job_id = await app.enqueue("billing.pay_invoice", {"invoice_id": invoice["id"]})
        job = await app.wait_status(job_id, "succeeded")
        assert job["result"] == {"invoice_id": invoice["id"], "status": "paid"}

    paid = (await app.get(f"/billing/invoices/{invoice['id']}")).json()
    [event_job] = await _receipt_jobs(engine)

    assert paid["status"] == "paid"
    assert paid["paid_at"] is not None
    assert {k: paid[k] for k in ("total_minor", "currency", "customer_id")} == {
        "total_minor": 4498,
        "currency": "EUR",
        "customer_id": "cust-1",
    }
    assert event_job.payload["name"] == "invoice.paid.v1"
    data = event_job.payload["data"]
    assert {k: data[k] for k in data if k not in ("event_id", "occurred_at")} == {
        "tenant_id": "default",
        "invoice_id": invoice["id"],
        "customer_id": "cust-1",
        "customer_email": "buyer@example.com",
        "amount_minor": 4498,
        "currency": "EUR",
    }


async def test_paying_over_http_sends_exactly_one_receipt_even_when_the_event_comes_twice(
    app: ApiClient,
    workers: Callable[..., Any],
    smtp: SmtpSink,
    engine: AsyncEngine,
    rabbit: RabbitProbe,
) -> None:
    await workers()
    invoice = await _issued_invoice(app)

    paid = await app.post(f"/billing/invoices/{invoice['id']}/pay")
    paid_again = await app.post(f"/billing/invoices/{invoice['id']}/pay")
    assert paid.status_code == paid_again.status_code == 200

    async def one_receipt_job_done() -> Any:
        found = await _receipt_jobs(engine)
        return found if found and all(j.status == "succeeded" for j in found) else None

    [receipt_job] = await wait_for(one_receipt_job_done, timeout=20, what="the receipt job")
    assert len(smtp.messages) == 1
    message = smtp.messages[0]
    assert message["To"] == "buyer@example.com"
    assert invoice["id"] in str(message["Subject"])

    # The same event delivered twice more: its message again, and a second job for it.
    again = job_envelope(
        job_id=JobId(receipt_job.id),
        job_type="notifications.send_receipt",
        queue="jobs.io",
        tenant_id="default",
    )
    await rabbit.publish_raw(rabbit.topology.queues["jobs.io"], again.body)
    duplicate_id = await app.enqueue("notifications.send_receipt", receipt_job.payload)
    await app.wait_status(duplicate_id, "succeeded")
    await asyncio.sleep(1)

    assert len(smtp.messages) == 1
    listed = (await app.get("/notifications", params={"invoice_id": invoice["id"]})).json()
    [notification] = listed["items"]
    assert notification["status"] == "sent"
    assert notification["recipient"] == "buyer@example.com"


async def _items_stored(engine: AsyncEngine, account_id: str) -> int:
    async with engine.connect() as conn:
        return int(
            await conn.scalar(
                select(func.count())
                .select_from(sync_items)
                .where(sync_items.c.account_id == account_id)
            )
            or 0
        )


async def test_an_account_with_five_pages_is_synced(
    app: ApiClient, workers: Callable[..., Any], engine: AsyncEngine
) -> None:
    await workers()
    accepted = await app.post("/sync/accounts/shop-pages-5/sync")
    assert accepted.status_code == 202
    job = await app.wait_status(accepted.json()["job_id"], "succeeded", timeout=30)

    account = (await app.get("/sync/accounts/shop-pages-5")).json()
    assert account["status"] == "synced"
    assert account["items_synced"] == 50
    assert account["last_synced_at"] is not None
    assert job["result"] == {"account_id": "shop-pages-5", "items_synced": 50}
    assert await _items_stored(engine, "shop-pages-5") == 50


async def test_asking_twice_at_once_gives_one_job(app: ApiClient) -> None:
    first, second = await asyncio.gather(
        app.post("/sync/accounts/twice-pages-2/sync"), app.post("/sync/accounts/twice-pages-2/sync")
    )

    assert first.json()["job_id"] == second.json()["job_id"]


async def test_two_syncs_of_one_account_run_one_at_a_time_and_store_each_page_once(
    app: ApiClient, workers: Callable[..., Any], vendor: RunningSandbox, engine: AsyncEngine
) -> None:
    await asyncio.gather(workers("w1"), workers("w2"))  # started together
    account = "shared-pages-5"
    ids = await asyncio.gather(
        app.enqueue("sync.account", {"account_id": account}),
        app.enqueue("sync.account", {"account_id": account}),
    )
    for job_id in ids:
        await app.wait_status(job_id, "succeeded", timeout=60)

    calls = [c["cursor"] for c in vendor.state.calls if c["account_id"] == account]
    assert vendor.state.max_in_flight[account] == 1
    assert calls == [None, "p1", "p2", "p3", "p4"] * 2
    assert await _items_stored(engine, account) == 50
    assert (await app.get(f"/sync/accounts/{account}")).json()["items_synced"] == 50


async def test_vendor_429s_make_the_sync_wait_never_fail(
    app: ApiClient, workers: Callable[..., Any], vendor: RunningSandbox
) -> None:
    vendor.state.rate_per_s = 2
    await workers(JOBRAIL_SYNC__VENDOR_RATE_PER_S="100", JOBRAIL_SYNC__VENDOR_BURST="100")
    accepted = await app.post("/sync/accounts/busy-pages-6/sync")

    job = await app.wait_status(accepted.json()["job_id"], "succeeded", "failed", timeout=60)

    throttled = [c for c in vendor.state.calls if c.get("status") == 429]
    assert job["status"] == "succeeded"
    assert throttled, "the sandbox should have answered 429 at least once"
    assert job["attempts"] == 1, "being throttled spends no attempt"
    assert (await app.get("/sync/accounts/busy-pages-6")).json()["items_synced"] == 60


async def test_a_vendor_400_fails_the_sync_with_the_vendors_reason(
    app: ApiClient, workers: Callable[..., Any]
) -> None:
    await workers()
    accepted = await app.post("/sync/accounts/bad-7/sync")

    job = await app.wait_status(accepted.json()["job_id"], "failed", timeout=20)

    assert job["attempts"] == 1
    assert "account bad-7 is suspended" in job["last_error"]
    account = (await app.get("/sync/accounts/bad-7")).json()
    assert account["status"] == "failed"
    assert "suspended" in account["last_error"]
