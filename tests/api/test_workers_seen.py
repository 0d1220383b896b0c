"""The embedded runtime beats like a worker process: it shows itself in GET
/admin/workers with the job it runs and in the jobrail_workers gauge, and marks itself
stopped when it shuts down."""

import os
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import select
from sqlalchemy.ext.asyncio import create_async_engine

from jobrail.runtime.app import create_app
from jobrail.store.tables import workers
from tests.api.conftest import embedded_settings, migrated
from tests.support.apps import REFERENCE
from tests.support.fixtures import ApiClient
from tests.support.services import wait_for


async def test_the_embedded_runtime_shows_itself_and_stops_cleanly(tmp_path: Path) -> None:
    quick = {"beat_interval_s": 0.2, "shutdown_grace_s": 1}
    settings = await migrated(embedded_settings(tmp_path, worker=quick))
    app = create_app(settings, modules=REFERENCE)
    client = ApiClient(transport=httpx.ASGITransport(app=app), base_url="http://api")
    client.app = app
    async with app.router.lifespan_context(app), client:
        api = client.sign_in_with("demo", "demo-key")
        tenant = await api.auth("acme")
        job_id = await api.echo(sleep_ms=60_000)

        async def running_it() -> Any:
            items = (await api.get("/admin/workers")).json()["items"]
            return items if items and job_id in items[0]["running"] else None

        [row] = await wait_for(running_it, timeout=15, what="the runtime to run the job")
        metrics = (await api.get("/metrics")).text
        refused = await api.get("/admin/workers", headers=tenant)

    engine = create_async_engine(settings.database.url.get_secret_value())
    async with engine.connect() as conn:
        [after] = (await conn.execute(select(workers))).mappings().all()
    await engine.dispose()

    assert (row["state"], row["pid"], row["concurrency"]) == (
        "alive",
        os.getpid(),
        settings.worker.max_async_tasks,
    )
    assert row["queues"] == settings.rabbit.queues
    assert 'jobrail_workers{state="alive"} 1.0' in metrics
    assert 'jobrail_workers{state="gone"} 0.0' in metrics
    assert refused.status_code == 403
    assert after["id"] == row["id"]
    assert after["stopped_at"] is not None
    assert after["running"] == []
