"""The host's own tests, as a team writes them: the database migrated from the test
process (``await rail.migrate()`` for jobrail's chains, Alembic's command API for the
host's own), then the app in-process, lifespan and all."""

import asyncio
import time
from pathlib import Path
from typing import Any

import httpx
from alembic import command
from alembic.config import Config

from host_app.main import app, rail

ACME = {"X-Team-Token": "acme-token"}
ALEMBIC_INI = Path(__file__).resolve().parents[1] / "alembic.ini"


async def migrate() -> None:
    await rail.migrate()  # jobrail's tables
    # The host's own chain; Alembic is synchronous, and this env.py runs its own loop.
    await asyncio.to_thread(command.upgrade, Config(str(ALEMBIC_INI)), "head")


async def finished(http: httpx.AsyncClient, job_id: str) -> dict[str, Any]:
    deadline = time.monotonic() + 10
    while True:
        job: dict[str, Any] = (await http.get(f"/jobs/{job_id}", headers=ACME)).json()
        if job["finished_at"] is not None or time.monotonic() > deadline:
            return job
        await asyncio.sleep(0.05)


async def test_a_report_renders_and_jobrails_demo_is_not_served() -> None:
    await migrate()
    transport = httpx.ASGITransport(app=app)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=transport, base_url="http://reports") as http,
    ):
        accepted = await http.post("/reports/q1/render", headers=ACME)
        job = await finished(http, accepted.json()["job_id"])
        row = await http.get("/reports/q1", headers=ACME)
        demo_key = {"Authorization": "Bearer demo-key"}
        overview = await http.get("/jobrail/admin/overview", headers=demo_key)
        echo = await http.post("/jobrail/demo/echo", json={"message": "hi"}, headers=demo_key)

    assert accepted.status_code == 202, accepted.text
    assert (job["status"], job["result"]) == (
        "succeeded",
        {"url": "https://reports.example/acme/q1.pdf"},
    )
    assert row.json()["status"] == "rendering"
    assert overview.status_code == 401, overview.text  # no demo tenant was seeded
    assert echo.status_code == 404, echo.text  # no demo module either
