"""The ops console as a browser uses it: signed in through the form (its cookies kept),
its forms' CSRF tokens read from the pages, and job rows written straight into the
jobs table for the lists to find."""

import re
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import insert
from sqlalchemy.ext.asyncio import AsyncEngine

from jobrail.runtime.app import create_app, runtime_of
from jobrail.store.tables import jobs
from jobrail.tenants.use_cases import CreateTenant
from tests.api.conftest import embedded_settings, migrated
from tests.support.apps import REFERENCE

CSRF = re.compile(r'name=csrf_token value="([^"]+)"')


def csrf_of(page: str) -> str:
    match = CSRF.search(page)
    assert match, page
    return match.group(1)


@dataclass
class Console:
    app: Any
    browser: httpx.AsyncClient
    engine: AsyncEngine
    csrf: str = ""

    async def sign_in(self) -> None:
        create = await runtime_of(self.app).container.get(CreateTenant)
        admin = await create(f"ops-{uuid.uuid4().hex[:6]}", admin=True)
        form = await self.browser.get("/ops")
        signed_in = await self.browser.post(
            "/ops/login", data={"api_key": admin.api_key, "csrf_token": csrf_of(form.text)}
        )
        assert signed_in.status_code == 303, signed_in.text
        page = await self.browser.get("/ops")
        self.csrf = csrf_of(page.text)

    async def page(self, path: str, **params: str) -> str:
        # Params given (even none) would replace the query a link already has.
        response = await self.browser.get(path, params=params or None)
        assert response.status_code == 200, response.text
        assert "default-src 'none'" in response.headers["Content-Security-Policy"]
        return response.text

    async def act(
        self, path: str, *, confirm: bool = True, csrf: bool = True, **fields: str
    ) -> httpx.Response:
        data = dict(fields)
        if csrf:
            data["csrf_token"] = self.csrf
        if confirm:
            data["confirm"] = "yes"
        return await self.browser.post(path, data=data)

    async def add_jobs(self, *rows: dict[str, Any]) -> list[uuid.UUID]:
        """Job rows as given over a finished demo.echo job of tenant demo."""
        now = datetime.now(UTC)
        full = [
            {
                "id": uuid.uuid4(),
                "tenant_id": "demo",
                "type": "demo.echo",
                "queue": "jobs.default",
                "status": "succeeded",
                "payload": {"message": "m"},
                "max_attempts": 3,
                "trace_context": {},
                "created_at": now,
                "updated_at": now,
                **row,
            }
            for row in rows
        ]
        async with self.engine.begin() as conn:
            for row in full:  # one by one: an executemany takes its columns from the first
                await conn.execute(insert(jobs).values(row))
        return [row["id"] for row in full]


@asynccontextmanager
async def console(tmp_path: Path, **overrides: object) -> AsyncIterator[Console]:
    settings = embedded_settings(
        tmp_path, retry={"base_s": 0.02, "cap_s": 0.2, "jitter": "none"}, **overrides
    )
    app = create_app(await migrated(settings), modules=REFERENCE)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://api") as c,
    ):
        engine = await runtime_of(app).container.get(AsyncEngine)
        running = Console(app, c, engine)
        await running.sign_in()
        yield running
