"""The README's "Use jobrail in your own FastAPI app" example, run as it is written."""

import asyncio
import importlib.util
import re
from pathlib import Path
from typing import Any

import httpx
import pytest

from jobrail.cli.schema import migrate
from jobrail.settings import load_settings
from tests.support.processes import ROOT
from tests.support.services import wait_for

SECTION = "## Use jobrail in your own FastAPI app"


def readme_example() -> str:
    text = (ROOT / "README.md").read_text()
    section = text[text.index(SECTION) :]
    match = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert match is not None
    return match.group(1)


async def test_the_readme_host_app_enqueues_and_serves_the_job(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("JOBRAIL_MODULES", "")
    monkeypatch.setenv("JOBRAIL_ENVIRONMENT", "test")
    monkeypatch.setenv("JOBRAIL_DATABASE__URL", f"sqlite+aiosqlite:///{tmp_path}/host.db")
    await asyncio.to_thread(migrate, load_settings())
    path = tmp_path / "readme_host.py"
    path.write_text(readme_example())
    spec = importlib.util.spec_from_file_location("readme_host", path)
    assert spec is not None
    assert spec.loader is not None
    host: Any = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(host)
    app = host.app
    acme = {"X-Tenant": "acme"}

    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://host") as http,
    ):
        accepted = await http.post("/reports/r-1/render", headers=acme)
        job_id = accepted.json()["job_id"]

        async def succeeded() -> dict[str, Any] | None:
            body: dict[str, Any] = (await http.get(f"/jobs/{job_id}", headers=acme)).json()
            return body if body["status"] == "succeeded" else None

        job = await wait_for(succeeded, timeout=10, what="the README's job to succeed")
        other = await http.get(f"/jobs/{job_id}", headers={"X-Tenant": "globex"})

    assert (accepted.status_code, accepted.json()["status"]) == (202, "pending")
    assert job["result"] == {"url": "https://reports.example/r-1.pdf"}
    assert other.status_code == 404
