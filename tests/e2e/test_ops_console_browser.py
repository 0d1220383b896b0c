"""The console in headless Chromium on the real services: sign in, filter the jobs, open
one, redrive a failed job, cancel a pending one, redrive and purge the dead-letter queue,
each confirmed on its own page and checked in the database (and RabbitMQ) after.
Screenshots of each page land in tests/artifacts/."""

import asyncio
import uuid
from collections.abc import Callable
from typing import Any

import httpx
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from jobrail.store.tables import job_events, jobs
from tests.e2e.conftest import ARTIFACTS, cli, until
from tests.support.rabbit import RabbitProbe
from tests.support.services import wait_for


async def _statuses(engine: AsyncEngine) -> dict[str, str]:
    async with engine.connect() as conn:
        found = await conn.execute(
            select(jobs.c.id, jobs.c.status).where(jobs.c.tenant_id == "acme")
        )
        return {str(i): s for i, s in found.all()}


async def _redrives(engine: AsyncEngine, job_id: str) -> int:
    query = select(job_events.c.id).where(
        job_events.c.job_id == uuid.UUID(job_id), job_events.c.name == "redriven"
    )
    async with engine.connect() as conn:
        return len((await conn.execute(query)).all())


async def test_an_operator_filters_opens_redrives_cancels_and_clears_the_dlq(
    browser: Any, served: str, stack_env: dict[str, str], engine: AsyncEngine, rabbit: RabbitProbe
) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    admin_key = cli(stack_env, "tenants", "create", "ops", "--admin")["api_key"]
    acme = {"Authorization": f"Bearer {cli(stack_env, 'tenants', 'create', 'acme')['api_key']}"}
    dlq = rabbit.topology.dead_letter_queue

    def shoot(name: str) -> None:
        browser.save_screenshot(str(ARTIFACTS / f"console-{name}.png"))

    async def on_page(check: Callable[[], Any], what: str) -> Any:
        return await asyncio.to_thread(until, check, what)

    def click(element_id: str) -> None:
        browser.find_element(By.ID, element_id).click()

    async with httpx.AsyncClient(base_url=served, timeout=10) as client:

        async def up() -> bool:
            try:
                return (await client.get("/ready")).status_code == 200
            except httpx.HTTPError:
                return False

        await wait_for(up, timeout=60, interval=0.2, what="the API")

        async def echo(query: str = "", **payload: Any) -> str:
            body = {"message": "<b>hello</b>", **payload}
            response = await client.post(f"/demo/echo{query}", json=body, headers=acme)
            assert response.status_code == 202, response.text
            return str(response.json()["job_id"])

        failed = [await echo(permanent=True) for _ in range(2)]
        succeeded = [await echo() for _ in range(2)]
        pending = await echo("?delay=600")

        async def settled() -> bool:
            now = await _statuses(engine)
            return all(now[j] == "failed" for j in failed) and all(
                now[j] == "succeeded" for j in succeeded
            )

        await wait_for(settled, timeout=30, what="the jobs to finish")

        async def dlq_holds(n: int) -> bool:
            return (await rabbit.depth(dlq))[0] == n

        await wait_for(lambda: dlq_holds(2), timeout=20, what="two dead letters")

        # Sign in, then the jobs list filtered to the failed ones.
        browser.get(f"{served}/ops")
        browser.find_element(By.ID, "api_key").send_keys(admin_key)
        click("sign-in")
        await on_page(lambda: browser.find_elements(By.ID, "jobs"), "the overview")
        shoot("overview")
        click("nav-jobs")
        await on_page(lambda: browser.find_elements(By.ID, "filters"), "the jobs page")
        Select(browser.find_element(By.ID, "status")).select_by_value("failed")
        browser.find_element(By.ID, "tenant").send_keys("acme")
        click("apply")
        await on_page(lambda: "status=failed" in browser.current_url, "the filtered list")
        listed = [
            row.get_attribute("data-job")
            for row in browser.find_elements(By.CSS_SELECTOR, "#job-list tr[data-job]")
        ]
        shoot("jobs")
        assert sorted(listed) == sorted(failed)

        # Open one: its payload, escaped, and its failed attempt's error.
        browser.find_element(By.CSS_SELECTOR, f'tr[data-job="{failed[0]}"] a').click()
        await on_page(lambda: browser.find_elements(By.ID, "payload"), "the job's page")
        assert "<b>hello</b>" in browser.find_element(By.ID, "payload").text
        assert "asked to fail permanently" in browser.find_element(By.ID, "attempts").text
        shoot("job")

        # Redrive it: a confirmation first, then the job runs again.
        click("redrive")
        await on_page(lambda: browser.find_elements(By.ID, "confirm"), "the confirmation")
        shoot("confirm")
        assert await _redrives(engine, failed[0]) == 0
        click("confirm")
        await on_page(lambda: browser.find_elements(By.ID, "note"), "the redrive's note")
        assert await _redrives(engine, failed[0]) == 1

        async def failed_again() -> bool:
            return (await _statuses(engine))[failed[0]] == "failed"

        await wait_for(failed_again, timeout=30, what="the redriven job to fail again")
        await wait_for(lambda: dlq_holds(2), timeout=20, what="its new dead letter")

        # Cancel the pending one.
        browser.get(f"{served}/ops/jobs/{pending}")
        await on_page(lambda: browser.find_elements(By.ID, "cancel"), "the cancel button")
        click("cancel")
        await on_page(lambda: browser.find_elements(By.ID, "confirm"), "the confirmation")
        assert (await _statuses(engine))[pending] == "pending"
        click("confirm")
        await on_page(lambda: browser.find_elements(By.ID, "note"), "the cancel's note")
        assert (await _statuses(engine))[pending] == "cancelled"

        # The DLQ: redrive one letter, then purge them all.
        click("nav-dlq")
        await on_page(
            lambda: len(browser.find_elements(By.CSS_SELECTOR, "tr[data-letter]")) == 2, "letters"
        )
        shoot("dlq")
        row = browser.find_element(By.CSS_SELECTOR, "tr[data-letter]")
        job_id = row.find_element(By.CSS_SELECTOR, "a").get_attribute("href").rsplit("/", 1)[1]
        before = await _redrives(engine, job_id)
        row.find_element(By.CSS_SELECTOR, "button").click()
        await on_page(lambda: browser.find_elements(By.ID, "confirm"), "the confirmation")
        click("confirm")
        await on_page(lambda: browser.find_elements(By.ID, "note"), "the redrive's note")
        assert await _redrives(engine, job_id) == before + 1

        async def that_failed_again() -> bool:
            return (await _statuses(engine))[job_id] == "failed"

        await wait_for(that_failed_again, timeout=30, what="the redriven job to fail again")
        await wait_for(lambda: dlq_holds(2), timeout=20, what="its new dead letter")
        browser.get(f"{served}/ops/dlq")
        await on_page(lambda: browser.find_elements(By.ID, "purge-all"), "the purge button")
        click("purge-all")
        await on_page(lambda: browser.find_elements(By.ID, "confirm"), "the confirmation")
        assert (await rabbit.depth(dlq))[0] == 2
        click("confirm")
        await on_page(lambda: browser.find_elements(By.ID, "dlq-empty"), "an empty DLQ")
        shoot("dlq-purged")
        assert (await rabbit.depth(dlq))[0] == 0
        assert all(s == "failed" for j, s in (await _statuses(engine)).items() if j in failed)

        click("nav-queues")
        await on_page(lambda: browser.find_elements(By.ID, "queue-list"), "the queues page")
        shoot("queues")
        assert admin_key not in browser.page_source
