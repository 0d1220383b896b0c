"""The API in embedded mode: a SQLite file and the in-process worker, no services needed."""

import asyncio
import atexit
import shutil
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from pydantic import SecretStr
from sqlalchemy import make_url

from jobrail.cli.schema import migrate
from jobrail.settings import Settings
from jobrail.store.schema import sqlite_path
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


# A SQLite file migrated once per test session for each set of modules and URL options:
# each test's database is a copy of it (0.5 s of migrations per test otherwise).
_MIGRATED: dict[tuple[str, ...], Path] = {}


async def migrated(settings: Settings) -> Settings:
    """`settings` with its database migrated for the reference application: a new SQLite
    file is a copy of one migrated the same way in this session."""
    path = sqlite_path(settings.database)
    if path is None or path.exists():
        await asyncio.to_thread(migrate, settings, REFERENCE)
        return settings
    url = make_url(settings.database.url.get_secret_value())
    key = (*settings.modules, *(f"{k}={v}" for k, v in sorted(url.query.items())))
    if key not in _MIGRATED:
        folder = tempfile.mkdtemp(prefix="jobrail-migrated-")
        atexit.register(shutil.rmtree, folder, ignore_errors=True)
        template = Path(folder) / "template.db"
        database = settings.database.model_copy(
            update={"url": SecretStr(url.set(database=str(template)).render_as_string(False))}
        )
        await asyncio.to_thread(
            migrate, settings.model_copy(update={"database": database}), REFERENCE
        )
        _MIGRATED[key] = template
    path.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(_MIGRATED[key], path)
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
