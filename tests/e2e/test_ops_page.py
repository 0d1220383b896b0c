"""The ops page in headless Chromium: sign in with an admin key, and the numbers it shows
are the database's (and RabbitMQ's). The screenshot lands in tests/artifacts/."""

import asyncio
import time
from typing import Any

import httpx
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from jobrail.store.tables import jobs
from tests.e2e.conftest import ARTIFACTS, cli
from tests.support.rabbit import RabbitProbe
from tests.support.services import wait_for

# The page refreshes itself every few seconds, so element handles go stale between
# two reads: each snapshot is taken by one script call, inside one document.
_SNAPSHOT = """
const text = (id) => document.getElementById(id)?.textContent.trim() ?? null;
if (!document.getElementById("jobs")) { return null; }
return {
  jobs: [...document.querySelectorAll("#jobs td[data-type]")].map(
    (c) => [c.dataset.type, c.dataset.status, c.textContent.trim()]),
  dlq: text("dlq-depth"),
  failedTotal: text("failed-total"),
  lag: text("outbox-lag"),
  failures: [...document.querySelectorAll("#failures td[data-job]")].map(
    (c) => c.textContent),
};
"""


def _snapshot(driver: Any) -> dict[str, Any]:
    for _ in range(10):
        snap = driver.execute_script(_SNAPSHOT)
        if snap is not None:
            return snap  # type: ignore[no-any-return]
        time.sleep(0.2)  # caught between two documents
    raise AssertionError("the ops page did not render its job table")


def _shown(driver: Any) -> dict[tuple[str, str], int]:
    return {(t, s): int(n) for t, s, n in _snapshot(driver)["jobs"] if int(n)}


async def _in_db(engine: AsyncEngine) -> dict[tuple[str, str], int]:
    query = select(jobs.c.type, jobs.c.status, func.count()).group_by(jobs.c.type, jobs.c.status)
    async with engine.connect() as conn:
        return {(t, s): n for t, s, n in (await conn.execute(query)).all()}


async def test_the_ops_page_shows_what_the_database_holds(
    browser: Any, served: str, stack_env: dict[str, str], engine: AsyncEngine, rabbit: RabbitProbe
) -> None:
    from selenium.webdriver.common.by import By

    admin_key = cli(stack_env, "tenants", "create", "ops", "--admin")["api_key"]
    tenant_key = cli(stack_env, "tenants", "create", "acme")["api_key"]
    async with httpx.AsyncClient(base_url=served, timeout=10) as client:

        async def up() -> bool:
            try:
                return (await client.get("/ready")).status_code == 200
            except httpx.HTTPError:
                return False

        await wait_for(up, timeout=60, interval=0.2, what="the API")
        acme = {"Authorization": f"Bearer {tenant_key}"}
        for n in range(3):
            await client.post("/demo/echo", json={"message": f"m{n}"}, headers=acme)
        for _ in range(2):
            await client.post("/demo/echo", json={"message": "x", "permanent": True}, headers=acme)

        async def settled() -> bool:
            counts = await _in_db(engine)
            return (
                counts.get(("demo.echo", "succeeded")) == 3
                and counts.get(("demo.echo", "failed")) == 2
            )

        await wait_for(settled, timeout=30, what="the jobs to finish")

        browser.get(f"{served}/ops")
        assert browser.find_element(By.ID, "api_key")  # the sign-in form
        browser.find_element(By.ID, "api_key").send_keys(admin_key)
        browser.find_element(By.ID, "sign-in").click()
        await asyncio.to_thread(
            lambda: _until(lambda: browser.find_elements(By.ID, "jobs"), "the ops page")
        )
        snap = _snapshot(browser)
        first = {(t, s): int(n) for t, s, n in snap["jobs"] if int(n)}
        dlq_shown = int(snap["dlq"])
        failed_total = int(snap["failedTotal"])
        lag = snap["lag"]
        failures = snap["failures"]
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        browser.save_screenshot(str(ARTIFACTS / "ops-page.png"))

        assert (
            first
            == await _in_db(engine)
            == {("demo.echo", "succeeded"): 3, ("demo.echo", "failed"): 2}
        )
        assert failed_total == 2
        assert dlq_shown == (await rabbit.depth(rabbit.topology.dead_letter_queue))[0] == 2
        assert lag == "0.0s"
        assert len(failures) == 2
        assert all("permanent error" in f for f in failures)
        assert admin_key not in browser.page_source

        # It refreshes itself: a new job shows up without anyone reloading the page.
        await client.post("/demo/echo", json={"message": "late"}, headers=acme)

        async def four() -> bool:
            return (await _in_db(engine)).get(("demo.echo", "succeeded")) == 4

        await wait_for(four, timeout=20, what="the fourth job")
        await asyncio.to_thread(
            lambda: _until(
                lambda: _shown(browser).get(("demo.echo", "succeeded")) == 4, "the refresh", 15
            )
        )
        assert _shown(browser) == await _in_db(engine)

        # Signing out (the form carries its CSRF token) ends the session: the sign-in form.
        await asyncio.to_thread(
            lambda: _until(lambda: _click(browser, "sign-out"), "the sign-out button")
        )
        await asyncio.to_thread(
            lambda: _until(lambda: browser.find_elements(By.ID, "api_key"), "the sign-in form")
        )
        browser.get(f"{served}/ops")
        assert browser.find_elements(By.ID, "api_key")
        assert not browser.find_elements(By.ID, "jobs")

    # A tenant key does not open the page.
    other = _signed_in_status(served, tenant_key)
    assert other == 403


def _signed_in_status(base: str, key: str) -> int:
    return httpx.get(f"{base}/ops", headers={"Authorization": f"Bearer {key}"}).status_code


def _until(check: Any, what: str, timeout: float = 15) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def _click(driver: Any, element_id: str) -> bool:
    """Click an element of a page that reloads itself: False if it went stale meanwhile."""
    from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
    from selenium.webdriver.common.by import By

    try:
        driver.find_element(By.ID, element_id).click()
    except (NoSuchElementException, StaleElementReferenceException):
        return False
    return True
