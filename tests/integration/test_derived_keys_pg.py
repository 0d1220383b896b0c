"""On Postgres, an input a route accepts never turns into a value its column cannot hold
(a 500 once: a 255-character account id made a 262-character idempotency key), and no
failed statement's error carries the statement's values into a log."""

import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import pytest
from sqlalchemy import text

from jobrail.settings import DatabaseSettings
from jobrail.store.engine import create_engine
from tests.support.fixtures import ApiClient, settings_from
from tests.support.rabbit import RabbitProbe
from tests.support.servers import RunningSandbox, sandbox_vendor


@pytest.fixture
def vendor() -> Iterator[RunningSandbox]:
    with sandbox_vendor(rate_per_s=50, page_delay_ms=0) as sandbox:
        yield sandbox


@pytest.fixture
def worker_env(stack_env: dict[str, str], vendor: RunningSandbox) -> dict[str, str]:
    return {**stack_env, "JOBRAIL_SYNC__VENDOR_BASE_URL": vendor.url}


@pytest.fixture
async def api(
    worker_env: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
    make_api: Callable[..., Any],
    rabbit: RabbitProbe,
) -> AsyncIterator[ApiClient]:
    async with make_api(settings_from(worker_env, monkeypatch)) as client:
        yield client


@pytest.mark.parametrize("length", [249, 255])
async def test_an_account_id_of_any_accepted_length_syncs(
    api: ApiClient, length: int, workers: Callable[..., Awaitable[Any]]
) -> None:
    await workers()
    account = ("shop-pages-1-" + "x" * length)[:length]
    first = await api.post(f"/sync/accounts/{account}/sync")
    assert first.status_code == 202, first.text
    job = await api.wait_status(first.json()["job_id"], "succeeded", "failed", timeout=30)
    assert job["status"] == "succeeded", job
    again = await api.post(f"/sync/accounts/{account}/sync")  # the next sync: a new key
    assert again.status_code == 202, again.text
    assert again.json()["job_id"] != first.json()["job_id"]
    synced = await api.get(f"/sync/accounts/{account}")
    assert synced.status_code == 200
    assert synced.json()["account_id"] == account


async def test_a_long_idempotency_key_made_in_code_replays_its_job(api: ApiClient) -> None:
    """A key of a module's making (no HTTP limit on it) is fitted, the same way each time."""
    from jobrail.jobs.enqueue import EnqueueJob, EnqueueJobCommand
    from jobrail.kernel.ids import TenantId
    from jobrail.runtime.app import runtime_of

    container = runtime_of(api.app).container
    enqueue = await container.get(EnqueueJob)
    command = EnqueueJobCommand(
        tenant_id=TenantId(api.tenant_id),
        type="demo.echo",
        payload={"message": "m"},
        idempotency_key="k" * 1000,
        entity_id="e" * 1000,
    )
    first = await enqueue(command)
    replay = await enqueue(command)
    assert first.created
    assert not replay.created
    assert replay.job.id == first.job.id
    assert len(first.job.idempotency_key or "") == 255


async def test_a_failed_statement_names_no_value_in_its_error(
    database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    engine = create_engine(DatabaseSettings(url=database_url))  # type: ignore[arg-type]
    secret = "tenant-secret-" + "v" * 300
    try:
        async with engine.connect() as conn:
            await conn.execute(text("CREATE TEMPORARY TABLE short_text (v varchar(10))"))
            with pytest.raises(Exception) as raised:
                await conn.execute(text("INSERT INTO short_text VALUES (:v)"), {"v": secret})
    finally:
        await engine.dispose()
    logging.getLogger("jobrail.test").exception("failed", exc_info=raised.value)
    assert "tenant-secret" not in str(raised.value)
    assert "tenant-secret" not in caplog.text
