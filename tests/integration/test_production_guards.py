"""The stack-mode halves of what production refuses (see tests/api/test_production_guards.py):
no sandbox vendor, /metrics only with its token, no demo tenant seeded into Postgres, and a
warning when an older embedded run left the demo key live there."""

import logging
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from jobrail.kernel.ids import TenantId
from jobrail.runtime.app import create_app, runtime_of
from jobrail.settings import MetricsSettings, Settings
from jobrail.store.tables import api_keys, tenants
from jobrail.tenants.use_cases import CreateTenant, IssueApiKey
from tests.support.apps import REFERENCE
from tests.support.rabbit import RabbitProbe


async def test_the_stack_mode_serves_no_sandbox_vendor(
    stack_settings: Settings, rabbit: RabbitProbe, make_api: Callable[[Settings], Any]
) -> None:
    production = stack_settings.model_copy(
        update={"environment": "production", "metrics": MetricsSettings(token="scrape")}
    )
    for settings in (stack_settings, production):
        async with make_api(settings) as api:
            listed = await api.get("/sandbox/vendor/_calls")
            cleared = await api.delete("/sandbox/vendor/_calls")
            items = await api.get("/sandbox/vendor/accounts/a-1/items")

        assert listed.status_code == cleared.status_code == items.status_code == 404, (
            settings.environment
        )


async def test_metrics_in_production_want_their_token(
    stack_settings: Settings, rabbit: RabbitProbe, make_api: Callable[[Settings], Any]
) -> None:
    production = stack_settings.model_copy(
        update={"environment": "production", "metrics": MetricsSettings(token="scrape-secret")}
    )
    async with make_api(production) as api:
        anonymous = await api.get("/metrics", headers={"Authorization": ""})
        tenant_key = await api.get("/metrics")  # the client's own tenant key is no token
        scraper = await api.get("/metrics", headers={"Authorization": "Bearer scrape-secret"})

    assert anonymous.status_code == tenant_key.status_code == 401
    assert anonymous.headers["WWW-Authenticate"] == "Bearer"
    assert anonymous.json()["error"]["code"] == "unauthorized"
    assert scraper.status_code == 200
    assert "jobrail_jobs_enqueued_total" in scraper.text


async def test_the_embedded_mode_on_postgres_seeds_no_demo_tenant(
    database_url: str, engine: AsyncEngine
) -> None:
    settings = Settings(
        mode="embedded",
        environment="test",
        database={"url": database_url},  # type: ignore[arg-type]
    )
    app = create_app(settings, modules=REFERENCE)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://api") as api,
    ):
        demo = await api.get("/jobs", headers={"Authorization": "Bearer demo-key"})

    async with engine.connect() as conn:
        seeded = (await conn.execute(select(tenants.c.id))).scalars().all()
        keys = (await conn.execute(select(api_keys.c.id))).scalars().all()
    assert demo.status_code == 401
    assert seeded == []
    assert keys == []


async def test_the_stack_mode_warns_of_a_live_demo_key_left_in_its_database(
    stack_settings: Settings,
    rabbit: RabbitProbe,
    make_api: Callable[[Settings], Any],
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with make_api(stack_settings) as api:
        # What an embedded run against this database used to leave behind.
        container = runtime_of(api.app).container
        await (await container.get(CreateTenant))("demo", admin=True)
        left = await (await container.get(IssueApiKey))(TenantId("demo"), key="demo-key")
    assert not [r for r in caplog.records if "demo API key" in r.getMessage()]

    with caplog.at_level(logging.WARNING, logger="jobrail"):
        async with make_api(stack_settings):
            pass

    [warning] = [r for r in caplog.records if "demo API key" in r.getMessage()]
    assert warning.levelno == logging.WARNING
    assert str(left.key_id) in warning.getMessage()
    assert "admin key of tenant 'demo'" in warning.getMessage()
    assert "demo-key" not in warning.getMessage()
