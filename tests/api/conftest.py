"""The API in embedded mode: a SQLite file and the in-process worker, no services needed."""

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from jobrail.cli.schema import migrate
from jobrail.settings import Settings
from tests.support.apps import REFERENCE
from tests.support.fixtures import ApiClient


def embedded_settings(tmp_path: Path, **overrides: object) -> Settings:
    values: dict[str, object] = {
        "mode": "embedded",
        "environment": "test",
        "database": {"url": f"sqlite+aiosqlite:///{tmp_path}/jobrail.db"},
        "retry": {"base_s": 0.05, "jitter": "none", "max_attempts": 3},
        # The overview read afresh for each request: a test reads it right after a change.
        "ops": {"overview_cache_s": 0},
    }
    values.update(overrides)
    # A job left running by a test is stopped within a second at teardown (the 30 s
    # default grace would hold each such test that long); a test may set its own.
    worker = overrides.get("worker") or {}
    assert isinstance(worker, dict)
    values["worker"] = {"shutdown_grace_s": 1.0, **worker}
    return Settings(**values)  # type: ignore[arg-type]


async def migrated(settings: Settings) -> Settings:
    """`settings` with its database migrated for the reference application."""
    await asyncio.to_thread(migrate, settings, REFERENCE)
    return settings


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[ApiClient]:
    import httpx

    from jobrail.runtime.app import create_app

    app = create_app(await migrated(embedded_settings(tmp_path)), modules=REFERENCE)
    client = ApiClient(transport=httpx.ASGITransport(app=app), base_url="http://api")
    client.app = app
    async with app.router.lifespan_context(app), client:
        # The embedded mode seeds tenant "demo" with the key demo-key.
        yield client.sign_in_with("demo", "demo-key")
