"""jobrail behind PgBouncer in transaction mode (``JOBRAIL_DATABASE__POOLER=transaction``):
the CLI's migrations and tenants, and a burst of enqueues through the API and workers.

Every app, worker and CLI here reaches Postgres through the ``pgbouncer`` fixture (fewer
server connections than clients, so clients take turns on them); the tests' own reads
go to Postgres directly.
"""

import asyncio
import json
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import make_url, text
from sqlalchemy.ext.asyncio import AsyncEngine

from jobrail.settings import DatabaseSettings
from jobrail.store.admin import drop_database
from jobrail.store.engine import create_engine
from tests.support.fixtures import settings_from
from tests.support.pgbouncer import PgBouncer
from tests.support.processes import run_jobrail
from tests.support.services import PG_SERVER, wait_for

RATE = 20  # enqueues a second
SECONDS = 10


@pytest.fixture
def stack_env(
    stack_env: dict[str, str], pgbouncer: PgBouncer, direct_database_url: str
) -> dict[str, str]:
    """The stack's settings with the database reached through PgBouncer."""
    database = make_url(direct_database_url).database or ""
    return {
        **stack_env,
        "JOBRAIL_DATABASE__URL": pgbouncer.url(database),
        "JOBRAIL_DATABASE__POOLER": "transaction",
        "JOBRAIL_API_LIMITS__ENABLED": "false",
    }


async def _race(settings: DatabaseSettings) -> list[Any]:
    """200 concurrent transactions on one engine: more than PgBouncer's server
    connections, so that statements prepared in one land on another's."""
    engine = create_engine(settings.model_copy(update={"pool_size": 20}))

    async def one(n: int) -> Any:
        async with engine.begin() as conn:
            return (await conn.execute(text("SELECT CAST(:n AS int) + 1"), {"n": n})).scalar()

    try:
        return await asyncio.gather(*(one(n) for n in range(200)), return_exceptions=True)
    finally:
        await engine.dispose()


async def test_the_engine_keeps_no_statement_across_transactions_only_when_told(
    pgbouncer: PgBouncer, database_url: str
) -> None:
    url = pgbouncer.url(make_url(database_url).database or "")

    cached = await _race(DatabaseSettings(url=url, pooler="none"))  # type: ignore[arg-type]
    pooled = await _race(DatabaseSettings(url=url, pooler="transaction"))  # type: ignore[arg-type]

    # With asyncpg's caches, a statement prepared by name on one server connection is
    # missing on (or clashes with another client's on) the next.
    assert any("prepared statement" in str(result) for result in cached), cached[:3]
    assert pooled == [n + 1 for n in range(200)]


def _ok(env: dict[str, str], *args: str) -> Any:
    done = run_jobrail(env, *args)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def test_the_cli_migrates_a_new_database_and_creates_tenants_through_the_pooler(
    stack_env: dict[str, str], pgbouncer: PgBouncer
) -> None:
    name = f"jobrail_pgb_{uuid.uuid4().hex[:8]}"
    env = {**stack_env, "JOBRAIL_DATABASE__URL": pgbouncer.url(name)}
    try:
        _ok(env, "migrate", "--create-database")
        _ok(env, "migrate")  # at its heads: nothing to do, no error
        created = [json.loads(_ok(env, "tenants", "create", f"t{n}").stdout) for n in range(3)]
        listed = json.loads(_ok(env, "tenants", "list").stdout)["tenants"]
        through = pgbouncer.stats(name)["total_xact_count"]
    finally:
        asyncio.run(drop_database(f"{PG_SERVER}/{name}"))

    assert [tenant["tenant_id"] for tenant in created] == ["t0", "t1", "t2"]
    assert {"t0", "t1", "t2"} <= {tenant["tenant_id"] for tenant in listed}
    assert through > 0


async def test_a_burst_of_enqueues_through_the_pooler_ends_every_job(
    stack_env: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
    make_api: Callable[..., Any],
    workers: Callable[..., Any],
    engine: AsyncEngine,
    pgbouncer: PgBouncer,
) -> None:
    database = make_url(stack_env["JOBRAIL_DATABASE__URL"]).database or ""
    before = pgbouncer.stats(database).get("total_xact_count", 0)
    started = [await workers("worker-1"), await workers("worker-2")]

    async with make_api(settings_from(stack_env, monkeypatch)) as api:

        async def enqueue(n: int) -> Any:
            # A retry for every 10th, a permanent failure for every 25th: every path
            # of a job's record.
            body = {"message": f"m{n}", "fail_times": 1 if n % 10 == 0 else 0}
            if n % 25 == 0:
                body["permanent"] = True
            return await api.post("/demo/echo", json=body)

        sent = []
        start = time.monotonic()
        for n in range(RATE * SECONDS):
            sent.append(asyncio.create_task(enqueue(n)))
            await asyncio.sleep(max(0.0, start + (n + 1) / RATE - time.monotonic()))
        responses = await asyncio.gather(*sent)

        assert [r.status_code for r in responses if r.status_code >= 500] == []
        assert {r.status_code for r in responses} == {202}, [r.text for r in responses][:3]
        ids = [r.json()["job_id"] for r in responses]

        async def all_ended() -> bool:
            async with engine.connect() as conn:
                left = await conn.scalar(
                    text("SELECT count(*) FROM jobs WHERE status NOT IN ('succeeded', 'failed')")
                )
            return left == 0

        await wait_for(all_ended, timeout=180, interval=0.5, what="every job to end")
        statuses = [(await api.job(job_id))["status"] for job_id in ids]

    failed = {n for n in range(RATE * SECONDS) if n % 25 == 0}
    assert [n for n, s in enumerate(statuses) if s == "failed"] == sorted(failed)
    assert statuses.count("succeeded") == RATE * SECONDS - len(failed)
    # Through PgBouncer, on its shared server connections.
    assert pgbouncer.stats(database)["total_xact_count"] - before > RATE * SECONDS
    for process in started:
        errors = [r for r in process.log_records() if r.get("level") in {"error", "critical"}]
        assert errors == [], errors[:3]
    assert "prepared statement" not in pgbouncer.log()
