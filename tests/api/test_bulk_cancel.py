"""Cancelling every job a filter takes: a tenant's own (``POST /jobs/bulk/cancel``) or any
tenant's (``POST /admin/jobs/bulk/cancel``), in bounded batches."""

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest

from jobrail.jobs.enqueue import EnqueueJob, EnqueueJobCommand
from jobrail.kernel.ids import TenantId
from jobrail.runtime.app import create_app, runtime_of
from tests.api.conftest import embedded_settings, migrated
from tests.support.apps import reference_and_test_jobs
from tests.support.cancelling import TERMINAL, wait_marked
from tests.support.fixtures import ApiClient

LATER = datetime.now(UTC) + timedelta(hours=1)
ENQUEUE_2_PER_MINUTE = {"enqueue": [{"scope": "tenant", "limit": 2, "window_s": 60}]}


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[ApiClient]:
    settings = embedded_settings(tmp_path, api_limits=ENQUEUE_2_PER_MINUTE)
    app = create_app(await migrated(settings), modules=reference_and_test_jobs.modules)
    client = ApiClient(transport=httpx.ASGITransport(app=app), base_url="http://api")
    client.app = app
    async with app.router.lifespan_context(app), client:
        yield await client.sign_in("acme")


async def _waiting(
    api: ApiClient, count: int, tenant: str = "acme", entity_id: str | None = None
) -> list[str]:
    """Jobs that wait an hour to run, enqueued past the API (and its limits)."""
    ids = []
    async with runtime_of(api.app).container() as request:
        enqueue = await request.get(EnqueueJob)
        for n in range(count):
            command = EnqueueJobCommand(
                tenant_id=TenantId(tenant),
                type="demo.echo",
                payload={"message": f"m{n}"},
                run_after=LATER,
                entity_id=entity_id,
            )
            ids.append(str((await enqueue(command)).job.id))
    return ids


async def _statuses(api: ApiClient, ids: list[str], tenant: str = "acme") -> set[str]:
    headers = await api.auth(tenant)
    return {(await api.job(job_id, headers))["status"] for job_id in ids}


async def test_a_tenant_cancels_its_own_jobs_of_a_type_and_no_one_elses(api: ApiClient) -> None:
    own, others = await _waiting(api, 3), await _waiting(api, 2, tenant="globex")

    answer = await api.post("/jobs/bulk/cancel", json={"type": "demo.echo"})

    assert answer.status_code == 200, answer.text
    assert answer.json() == {"cancelled": 3, "stopping": 0, "more": False}
    assert await _statuses(api, own) == {"cancelled"}
    assert "cancelled" not in await _statuses(api, others, "globex")
    again = await api.post("/jobs/bulk/cancel", json={"type": "demo.echo"})
    assert again.json() == {"cancelled": 0, "stopping": 0, "more": False}


async def test_the_entity_and_created_before_narrow_what_is_cancelled(api: ApiClient) -> None:
    of_entity = await _waiting(api, 2, entity_id="acct-1")
    cut = datetime.now(UTC).isoformat()
    later = await _waiting(api, 2)

    by_entity = await api.post("/jobs/bulk/cancel", json={"entity_id": "acct-1"})
    before = await api.post(
        "/jobs/bulk/cancel", json={"created_before": cut, "status": ["pending"]}
    )

    assert by_entity.json()["cancelled"] == 2
    assert before.json()["cancelled"] == 0  # the entity's were the only ones before the cut
    assert await _statuses(api, of_entity) == {"cancelled"}
    assert "cancelled" not in await _statuses(api, later)


async def test_batches_are_bounded_and_more_says_what_is_left(
    api: ApiClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("jobrail.jobs.cancel.BATCH", 2)
    monkeypatch.setattr("jobrail.jobs.cancel.MAX_BATCHES", 2)
    jobs = await _waiting(api, 5)

    first = await api.post("/jobs/bulk/cancel", json={"type": "demo.echo"})
    second = await api.post("/jobs/bulk/cancel", json={"type": "demo.echo"})

    assert first.json() == {"cancelled": 4, "stopping": 0, "more": True}
    assert second.json() == {"cancelled": 1, "stopping": 0, "more": False}
    assert await _statuses(api, jobs) == {"cancelled"}


async def test_running_jobs_are_stopped_and_counted_once(api: ApiClient, tmp_path: Path) -> None:
    payload = {"way": "sleep", "marks": str(tmp_path), "resource": "bulk"}
    job_id = await api.enqueue("test.cancellable", payload)
    await wait_marked(tmp_path, job_id, "started")

    answer = await api.post("/jobs/bulk/cancel", json={"status": ["running"]})

    assert answer.json() == {"cancelled": 0, "stopping": 1, "more": False}
    assert (await api.wait_status(job_id, *TERMINAL, timeout=20))["status"] == "cancelled"


async def test_bulk_cancels_spend_no_enqueue_budget(api: ApiClient) -> None:
    await _waiting(api, 1)
    spent = [(await api.post("/demo/echo", json={"message": "m"})).status_code for _ in range(3)]
    assert spent[-1] == 429

    answer = await api.post("/jobs/bulk/cancel", json={"type": "demo.echo"})

    assert answer.status_code == 200, answer.text
    assert answer.json()["cancelled"] >= 1  # the waiting one (the others may have run)


async def test_an_admin_cancels_any_tenants_jobs_or_one_tenants(api: ApiClient) -> None:
    # One entity across both tenants: the runtime's own scheduled jobs (pending too) are
    # not this test's to count.
    acme = await _waiting(api, 2, entity_id="shop-9")
    globex = await _waiting(api, 2, tenant="globex", entity_id="shop-9")
    admin = await api.auth("ops", admin=True)

    one = await api.post(
        "/admin/jobs/bulk/cancel", json={"tenant": "globex", "type": "demo.echo"}, headers=admin
    )
    assert one.json() == {"cancelled": 2, "stopping": 0, "more": False}
    assert "cancelled" not in await _statuses(api, acme)

    every = await api.post(
        "/admin/jobs/bulk/cancel",
        json={"status": ["pending", "retrying"], "entity_id": "shop-9"},
        headers=admin,
    )
    assert every.json()["cancelled"] == 2
    assert await _statuses(api, acme) == await _statuses(api, globex, "globex") == {"cancelled"}


async def test_a_tenant_key_is_refused_the_admin_route(api: ApiClient) -> None:
    answer = await api.post("/admin/jobs/bulk/cancel", json={"type": "demo.echo"})

    assert answer.status_code == 403, answer.text


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ({}, "at least one of"),
        ({"status": ["succeeded"]}, ""),
        ({"status": []}, ""),
        ({"type": ""}, ""),
        ({"created_before": "2026-01-01T00:00:00"}, ""),
        ({"created_before": "yesterday"}, ""),
        ({"type": "demo.echo", "tenant": "globex"}, ""),
        ({"type": 5}, ""),
        ([], ""),
    ],
)
async def test_a_bad_filter_is_a_422_that_says_why(api: ApiClient, body: object, says: str) -> None:
    answer = await api.post("/jobs/bulk/cancel", json=body)

    assert answer.status_code == 422, answer.text
    assert says in answer.json()["error"]["message"]
