"""A large account's sync through the API in embedded mode: its first page in the sync's
job, then a chain of page jobs, one per page, each taking the cursor the one before it
returned and reporting its progress on GET /jobs/{id}; GET /chains/{id} counts them."""

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.api.conftest import embedded_settings, migrated
from tests.support.apps import REFERENCE
from tests.support.fixtures import ApiClient
from tests.support.servers import RunningSandbox, sandbox_vendor
from tests.support.services import wait_for

PAGE_JOBS_FROM = 5


@pytest.fixture
def vendor() -> Iterator[RunningSandbox]:
    # Each page takes a while, so that a page job is seen running.
    with sandbox_vendor(rate_per_s=100, page_delay_ms=150) as sandbox:
        yield sandbox


@pytest.fixture
async def api(
    tmp_path: Path, vendor: RunningSandbox, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[ApiClient]:
    from jobrail.runtime.app import create_app

    monkeypatch.setenv("JOBRAIL_SYNC__VENDOR_BASE_URL", vendor.url)
    monkeypatch.setenv("JOBRAIL_SYNC__PAGE_JOBS_FROM", str(PAGE_JOBS_FROM))
    settings = embedded_settings(tmp_path, jobs={"progress_interval_ms": 20})
    app = create_app(await migrated(settings), modules=REFERENCE)
    client = ApiClient(transport=httpx.ASGITransport(app=app), base_url="http://api")
    client.app = app
    async with app.router.lifespan_context(app), client:
        yield client.sign_in_with("demo", "demo-key")


async def _page_jobs(api: ApiClient) -> list[dict[str, Any]]:
    listed = (await api.get("/jobs", params={"type": "sync.page", "limit": 200})).json()
    return sorted(
        [await api.job(job["id"]) for job in listed["items"]], key=lambda j: j["flow"]["step"]
    )


async def test_a_large_account_syncs_as_a_chain_of_page_jobs_with_progress(
    api: ApiClient, vendor: RunningSandbox
) -> None:
    account = "big-pages-12"

    accepted = await api.post(f"/sync/accounts/{account}/sync")

    assert accepted.status_code == 202, accepted.text
    first = await api.wait_status(accepted.json()["job_id"], "succeeded", "failed")
    assert first["status"] == "succeeded", first["last_error"]
    chain_id = first["result"]["chain_id"]
    assert first["result"]["items_synced"] == 10  # the first page, then the chain

    async def a_page_job_running() -> dict[str, Any] | None:
        running = [j for j in await _page_jobs(api) if j["status"] == "running"]
        return running[0] if running and running[0]["progress"] else None

    running = await wait_for(a_page_job_running, timeout=20, what="a page job to run")
    page = running["flow"]["step"] + 2
    assert running["progress"]["total"] == 12
    assert running["progress"]["current"] in (page - 1, page)
    assert running["progress"]["message"].startswith(f"page {page} of 12")
    midway = (await api.get(f"/chains/{chain_id}")).json()
    assert midway["kind"] == "chain"
    assert midway["counts"]["total"] == 11
    assert midway["counts"]["succeeded"] < 11

    async def chain_finished() -> dict[str, Any] | None:
        body: dict[str, Any] = (await api.get(f"/chains/{chain_id}")).json()
        return body if body["finished_at"] else None

    chain = await wait_for(chain_finished, timeout=60, what="the chain to finish")
    assert chain["status"] == "succeeded"
    assert chain["counts"] == {
        "total": 11,
        "pending": 0,
        "running": 0,
        "succeeded": 11,
        "failed": 0,
        "cancelled": 0,
    }
    steps = await _page_jobs(api)
    assert [s["result"]["page"] for s in steps] == list(range(2, 13))
    assert [(s["progress"]["current"], s["progress"]["total"]) for s in steps] == [
        (n, 12) for n in range(2, 13)
    ]
    assert all(s["progress"]["message"].endswith(": 10 new items") for s in steps)
    assert all(s["flow"]["id"] == chain_id for s in steps)
    # Each page job fetched the cursor the one before it returned, once.
    cursors = [c["cursor"] for c in vendor.state.calls if c["account_id"] == account]
    assert cursors == [None, *(f"p{n}" for n in range(1, 12))]
    synced = (await api.get(f"/sync/accounts/{account}")).json()
    assert (synced["status"], synced["items_synced"]) == ("synced", 120)


async def test_an_account_below_the_threshold_syncs_in_its_one_job(
    api: ApiClient, vendor: RunningSandbox
) -> None:
    accepted = (await api.post(f"/sync/accounts/small-pages-{PAGE_JOBS_FROM - 1}/sync")).json()

    job = await api.wait_status(accepted["job_id"], "succeeded", "failed")

    assert job["result"] == {
        "account_id": f"small-pages-{PAGE_JOBS_FROM - 1}",
        "items_synced": 10 * (PAGE_JOBS_FROM - 1),
    }
    assert (await api.get("/jobs", params={"type": "sync.page"})).json()["items"] == []


async def test_page_jobs_retried_on_vendor_errors_store_each_page_once(
    api: ApiClient, vendor: RunningSandbox
) -> None:
    # The sandbox fails every other call of a "flaky" account with a 503.
    account = "flaky-pages-6"
    accepted = (await api.post(f"/sync/accounts/{account}/sync")).json()
    first = await api.wait_status(accepted["job_id"], "succeeded", "failed", timeout=30)
    chain_id = first["result"]["chain_id"]

    async def chain_finished() -> dict[str, Any] | None:
        body: dict[str, Any] = (await api.get(f"/chains/{chain_id}")).json()
        return body if body["finished_at"] else None

    chain = await wait_for(chain_finished, timeout=60, what="the chain to finish")

    assert chain["status"] == "succeeded"
    assert chain["counts"]["succeeded"] == 5
    assert {s["attempts"] for s in await _page_jobs(api)} == {2}
    synced = (await api.get(f"/sync/accounts/{account}")).json()
    assert (synced["status"], synced["items_synced"]) == ("synced", 60)
