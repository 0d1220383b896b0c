"""The console's workers page in headless Chromium on the real services: an operator
signs in, a `jobrail worker` process starts and shows up on the page (through the page's
own htmx refresh) with the job it runs, then stops on SIGTERM and shows stopped; the
workers table holds what the page said. Then the schedules page shows a `jobrail
scheduler`'s lead and the job it fired, and the limits page a lock held in Redis with its
job, reset through its confirmation.
Screenshots land in tests/artifacts/."""

import asyncio
import json
import os
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from redis.asyncio import Redis
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from jobrail.limits.model import Acquire, Lock
from jobrail.limits.redis import RedisLimits
from tests.e2e.conftest import ARTIFACTS, cli
from tests.support.processes import BIN, Process, start_worker
from tests.support.servers import free_port
from tests.support.services import REDIS_URL, wait_for

BEAT_S = "0.5"
# prune-workers every second, for the API (which shows it) and the scheduler (which fires it).
EVERY_SECOND = json.dumps({"prune-workers": {"cron": "* * * * * *"}})


@pytest.fixture
def stack_env(stack_env: dict[str, str]) -> dict[str, str]:
    """Quick beats, for the worker and for the API that judges them."""
    return {
        **stack_env,
        "JOBRAIL_WORKER__BEAT_INTERVAL_S": BEAT_S,
        "JOBRAIL_SCHEDULER__SCHEDULES": EVERY_SECOND,
    }


@pytest.fixture
def api_only(stack_env: dict[str, str]) -> Iterator[str]:
    """An API process and no worker: the test starts and stops its own."""
    port = free_port()
    api = Process(
        [str(BIN / "jobrail"), "api"], {**stack_env, "JOBRAIL_API__PORT": str(port)}, "api"
    )
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        api.stop()


def _until(check: Callable[[], Any], what: str, timeout: float = 60) -> Any:
    from selenium.common.exceptions import StaleElementReferenceException

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            found = check()
        except StaleElementReferenceException:  # htmx swapped the part read meanwhile
            found = None
        if found:
            return found
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


async def _stored_workers(engine: AsyncEngine) -> list[dict[str, Any]]:
    from jobrail.store.tables import workers

    async with engine.connect() as conn:
        return [dict(row) for row in (await conn.execute(select(workers))).mappings().all()]


async def _job(engine: AsyncEngine, job_id: str) -> dict[str, Any]:
    from jobrail.store.tables import jobs

    async with engine.connect() as conn:
        query = select(jobs).where(jobs.c.id == uuid.UUID(job_id))
        return dict((await conn.execute(query)).mappings().one())


async def test_an_operator_sees_a_worker_appear_run_a_job_and_stop(
    browser: Any, api_only: str, stack_env: dict[str, str], engine: AsyncEngine
) -> None:
    from selenium.webdriver.common.by import By

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    admin_key = cli(stack_env, "tenants", "create", "ops", "--admin")["api_key"]
    acme = {"Authorization": f"Bearer {cli(stack_env, 'tenants', 'create', 'acme')['api_key']}"}

    def shoot(name: str) -> None:
        browser.save_screenshot(str(ARTIFACTS / f"console-{name}.png"))

    async def on_page(check: Callable[[], Any], what: str) -> Any:
        return await asyncio.to_thread(_until, check, what)

    def cell(worker_row: Any, field: str) -> str:
        text: str = worker_row.find_element(By.CSS_SELECTOR, f'td[data-field="{field}"]').text
        return text

    async with httpx.AsyncClient(base_url=api_only, timeout=10) as client:

        async def up() -> bool:
            try:
                return (await client.get("/ready")).status_code == 200
            except httpx.HTTPError:
                return False

        await wait_for(up, timeout=60, interval=0.2, what="the API")

        # Sign in and open the workers page: nobody runs jobs yet.
        browser.get(f"{api_only}/ops")
        browser.find_element(By.ID, "api_key").send_keys(admin_key)
        browser.find_element(By.ID, "sign-in").click()
        await on_page(lambda: browser.find_elements(By.ID, "nav-workers"), "the overview")
        browser.find_element(By.ID, "nav-workers").click()
        await on_page(lambda: browser.find_elements(By.ID, "no-workers"), "an empty page")
        shoot("workers-none")
        assert await _stored_workers(engine) == []

        # A worker starts, and runs a long job: the page (left as it is) shows both.
        worker: Process = start_worker(stack_env, name="worker")
        try:
            response = await client.post(
                "/demo/echo", json={"message": "m", "sleep_ms": 120_000}, headers=acme
            )
            assert response.status_code == 202, response.text
            job_id = str(response.json()["job_id"])

            def running_it() -> Any:
                found = browser.find_elements(By.CSS_SELECTOR, "#worker-list tr[data-worker]")
                return found if found and job_id in cell(found[0], "running") else None

            [row] = await on_page(running_it, "the worker and its job on the page")
            shoot("workers-alive")
            worker_id = row.get_attribute("data-worker")
            pid = int(row.get_attribute("data-pid"))
            assert cell(row, "state") == "alive"
            assert browser.find_element(By.ID, "workers-alive").text == "1"
            # The beating process is the worker's own or one of its children.
            assert os.getpgid(pid) == worker.pid
            [stored] = await _stored_workers(engine)
            assert (stored["id"], stored["pid"], stored["stopped_at"]) == (worker_id, pid, None)
            assert job_id in stored["running"]

            # Its running job links to the job's page.
            link = row.find_element(By.CSS_SELECTOR, 'td[data-field="running"] a')
            assert link.get_attribute("href").endswith(f"/ops/jobs/{job_id}")

            # SIGTERM: it stops cleanly and marks itself stopped.
            await asyncio.to_thread(worker.terminate)
        finally:
            worker.stop()

        def stopped() -> Any:
            found = browser.find_elements(By.CSS_SELECTOR, f'tr[data-worker="{worker_id}"]')
            return found if found and cell(found[0], "state").startswith("stopped") else None

        [gone_row] = await on_page(stopped, "the worker to show stopped")
        shoot("workers-stopped")
        assert browser.find_element(By.ID, "workers-stopped").text == "1"
        assert browser.find_element(By.ID, "workers-alive").text == "0"
        assert cell(gone_row, "running") == ""
        [after] = await _stored_workers(engine)
        assert after["id"] == worker_id
        assert after["stopped_at"] is not None
        assert after["running"] == []

        # The schedules page: nobody leads, until a `jobrail scheduler` runs.
        browser.find_element(By.ID, "nav-schedules").click()
        await on_page(lambda: browser.find_elements(By.ID, "schedule-list"), "the schedules")
        assert "No scheduler leads" in browser.find_element(By.ID, "leader").text
        scheduler = Process([str(BIN / "jobrail"), "scheduler"], stack_env, "scheduler")
        try:

            def fired() -> Any:
                leader = browser.find_element(By.ID, "leader").text
                prune = browser.find_element(By.CSS_SELECTOR, 'tr[data-schedule="prune-workers"]')
                links = prune.find_elements(By.CSS_SELECTOR, "a")
                return (leader, links[0]) if "Leader:" in leader and links else None

            leader, last_job = await on_page(fired, "a leader, and prune-workers fired")
            shoot("schedules")
            last_id = last_job.get_attribute("href").rsplit("/", 1)[1]
        finally:
            scheduler.stop()
        assert f":{scheduler.pid}:" in leader  # host:pid:random, from Redis
        stored_job = await _job(engine, last_id)
        assert (stored_job["tenant_id"], stored_job["entity_id"]) == ("_system", "prune-workers")

        # The limits page: a lock held in Redis by a job's admission, then reset.
        browser.find_element(By.ID, "nav-limits").click()
        await on_page(lambda: browser.find_elements(By.ID, "declared-limits"), "the limits")
        backend = RedisLimits(
            Redis.from_url(REDIS_URL), key_prefix=stack_env["JOBRAIL_REDIS__KEY_PREFIX"]
        )
        lock = Acquire(Lock(key="account:{tenant_id}:{account_id}"), "account:acme:42")
        holder_job = str(uuid.uuid4())
        try:
            assert (await backend.admit([lock], f"{holder_job}/e2e")).allowed
            browser.find_element(By.ID, "job_type").send_keys("sync.account")
            browser.find_element(By.ID, "limit").send_keys("lock")
            browser.find_element(By.ID, "key").send_keys("account:acme:42")
            browser.find_element(By.ID, "look").click()
            await on_page(lambda: browser.find_elements(By.ID, "holders"), "the lock's holder")
            shoot("limits")
            holder_link = browser.find_element(By.CSS_SELECTOR, "#holders a")
            assert holder_link.get_attribute("href").endswith(f"/ops/jobs/{holder_job}")
            browser.find_element(By.ID, "reset").click()
            await on_page(lambda: browser.find_elements(By.ID, "confirm"), "the confirmation")
            shoot("limits-confirm")
            assert [h["holder"] for h in await backend.holders(lock)] == [f"{holder_job}/e2e"]
            browser.find_element(By.ID, "confirm").click()
            await on_page(lambda: browser.find_elements(By.ID, "note"), "the reset's note")
            assert browser.find_elements(By.ID, "no-holders")
            assert await backend.holders(lock) == []
        finally:
            await backend.close()
        assert admin_key not in browser.page_source
