"""The console's bulk cancel, a running job's cancel and a failed attempt's traceback in
headless Chromium on the real services (an API process and a worker process): each
action confirmed on its own page and checked in the database after. Screenshots land
in tests/artifacts/ (console-bulk-*.png)."""

import asyncio
import uuid
from collections.abc import Callable
from typing import Any

import httpx
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from jobrail.store.tables import job_attempt_failures, job_events, jobs
from tests.e2e.conftest import ARTIFACTS, cli, until
from tests.support.services import wait_for


async def _status(engine: AsyncEngine, job_id: str) -> str:
    async with engine.connect() as conn:
        status: str = await conn.scalar(select(jobs.c.status).where(jobs.c.id == uuid.UUID(job_id)))
    return status


async def test_an_operator_cancels_a_running_job_and_bulk_cancels_by_filter(
    browser: Any, served: str, stack_env: dict[str, str], engine: AsyncEngine
) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    admin_key = cli(stack_env, "tenants", "create", "ops", "--admin")["api_key"]
    acme = {"Authorization": f"Bearer {cli(stack_env, 'tenants', 'create', 'acme')['api_key']}"}
    beta = {"Authorization": f"Bearer {cli(stack_env, 'tenants', 'create', 'beta')['api_key']}"}

    def shoot(name: str) -> None:
        browser.save_screenshot(str(ARTIFACTS / f"console-bulk-{name}.png"))

    async def on_page(check: Callable[[], Any], what: str) -> Any:
        return await asyncio.to_thread(until, check, what)

    def click(element_id: str) -> None:
        browser.find_element(By.ID, element_id).click()

    async def until_status(job_id: str, status: str, timeout: float = 30) -> None:
        async def reached() -> bool:
            return await _status(engine, job_id) == status

        await wait_for(reached, timeout=timeout, what=f"job {job_id} to be {status}")

    async with httpx.AsyncClient(base_url=served, timeout=10) as client:

        async def up() -> bool:
            try:
                return (await client.get("/ready")).status_code == 200
            except httpx.HTTPError:
                return False

        await wait_for(up, timeout=60, interval=0.2, what="the API")

        async def echo(headers: dict[str, str], query: str = "", **payload: Any) -> str:
            body = {"message": "hello", **payload}
            response = await client.post(f"/demo/echo{query}", json=body, headers=headers)
            assert response.status_code == 202, response.text
            return str(response.json()["job_id"])

        running = await echo(acme, sleep_ms=600_000)
        failed = await echo(acme, permanent=True)
        waiting = [await echo(acme, "?delay=600") for _ in range(3)]
        other = await echo(beta, "?delay=600")
        await until_status(running, "running")
        await until_status(failed, "failed")

        async def noted() -> bool:
            query = select(job_attempt_failures.c.id).where(
                job_attempt_failures.c.job_id == uuid.UUID(failed)
            )
            async with engine.connect() as conn:
                return bool((await conn.execute(query)).first())

        # Its traceback is noted beside the attempt's end, not before it.
        await wait_for(noted, what="the failed attempt's note")

        browser.get(f"{served}/ops")
        browser.find_element(By.ID, "api_key").send_keys(admin_key)
        click("sign-in")
        await on_page(lambda: browser.find_elements(By.ID, "jobs"), "the overview")

        # A failed job's page: its attempt's traceback.
        browser.get(f"{served}/ops/jobs/{failed}")
        await on_page(lambda: browser.find_elements(By.ID, "attempts"), "the failed job")
        browser.find_element(By.CSS_SELECTOR, "#attempts details.traceback summary").click()
        shown = browser.find_element(By.CSS_SELECTOR, 'pre[data-traceback="1"]')
        browser.execute_script("arguments[0].scrollIntoView()", shown)
        traceback = shown.text
        assert "Traceback (most recent call last)" in traceback
        assert "PermanentError: asked to fail permanently" in traceback
        shoot("traceback")

        # Cancel the running job: confirmed, then it stops and ends cancelled.
        browser.get(f"{served}/ops/jobs/{running}")
        await on_page(lambda: browser.find_elements(By.ID, "cancel"), "the cancel button")
        shoot("running")
        click("cancel")
        await on_page(lambda: browser.find_elements(By.ID, "confirm"), "the confirmation")
        assert await _status(engine, running) == "running"
        click("confirm")
        await on_page(lambda: browser.find_elements(By.ID, "note"), "the cancel's note")
        await until_status(running, "cancelled")
        browser.get(f"{served}/ops/jobs/{running}")
        await on_page(
            lambda: "cancelled" in browser.find_element(By.ID, "job").text, "the cancelled job"
        )
        assert not browser.find_elements(By.ID, "cancel")
        shoot("running-cancelled")

        # Bulk cancel acme's pending jobs from the filtered list.
        click("nav-jobs")
        await on_page(lambda: browser.find_elements(By.ID, "filters"), "the jobs page")
        Select(browser.find_element(By.ID, "status")).select_by_value("pending")
        browser.find_element(By.ID, "tenant").send_keys("acme")
        click("apply")
        await on_page(lambda: "status=pending" in browser.current_url, "the filtered list")
        browser.find_element(By.CSS_SELECTOR, "#bulk summary").click()
        assert browser.find_element(By.ID, "bulk-tenant").get_attribute("value") == "acme"
        shoot("bulk-form")
        click("bulk-cancel")
        await on_page(lambda: browser.find_elements(By.ID, "confirm"), "the confirmation")
        question = browser.find_element(By.ID, "question").text
        assert question.startswith("Cancel 3 jobs (status pending, tenant acme)"), question
        shoot("bulk-confirm")
        assert [await _status(engine, j) for j in waiting] == ["pending"] * 3
        click("confirm")
        await on_page(lambda: browser.find_elements(By.ID, "bulk-result"), "the result")
        result = browser.find_element(By.ID, "bulk-result").text
        assert result == "3 cancelled, 0 running asked to stop.", result
        shoot("bulk-done")
        assert [await _status(engine, j) for j in waiting] == ["cancelled"] * 3
        assert await _status(engine, other) == "pending"

        # Bulk redrive acme's failed job: it runs again (and fails again, as it asks).
        browser.get(f"{served}/ops/jobs?status=failed&tenant=acme")
        await on_page(lambda: browser.find_elements(By.ID, "bulk"), "the failed jobs")
        browser.find_element(By.CSS_SELECTOR, "#bulk summary").click()
        click("bulk-redrive")
        await on_page(lambda: browser.find_elements(By.ID, "confirm"), "the confirmation")
        question = browser.find_element(By.ID, "question").text
        assert question.startswith("Redrive 1 job (status failed, tenant acme)"), question
        click("confirm")
        await on_page(lambda: browser.find_elements(By.ID, "bulk-result"), "the result")
        assert browser.find_element(By.ID, "bulk-result").text.startswith("1 redriven, 0 skipped")
        shoot("bulk-redriven")
        async with engine.connect() as conn:
            redriven = select(job_events.c.id).where(
                job_events.c.job_id == uuid.UUID(failed), job_events.c.name == "redriven"
            )
            assert len((await conn.execute(redriven)).all()) == 1
        await until_status(failed, "failed")
        assert admin_key not in browser.page_source
