"""A tenant's cap on its jobs waiting to start: set by an operator (admin API), the next
enqueue beyond it is a 429 that names the cap, and nothing is written (embedded mode)."""

from datetime import UTC, datetime, timedelta

from jobrail.jobs.enqueue import EnqueueJob, EnqueueJobCommand
from jobrail.kernel.ids import TenantId
from jobrail.runtime.app import runtime_of
from tests.support.fixtures import ApiClient


async def _later(api: ApiClient, tenant: str) -> str:
    """A job of `tenant` due in an hour: it waits to start all through the test."""
    async with runtime_of(api.app).container() as request:
        enqueue = await request.get(EnqueueJob)
        result = await enqueue(
            EnqueueJobCommand(
                tenant_id=TenantId(tenant),
                type="demo.echo",
                payload={"message": "later"},
                run_after=datetime.now(UTC) + timedelta(hours=1),
            )
        )
    return str(result.job.id)


async def test_an_enqueue_beyond_the_tenants_cap_is_a_429_naming_it(api: ApiClient) -> None:
    admin = await api.auth("ops", admin=True)
    tenant = await api.auth("capped")
    set_cap = await api.put(
        "/admin/tenants/capped/max-queued", json={"max_queued": 2}, headers=admin
    )
    waiting = [await _later(api, "capped") for _ in range(2)]

    refused = await api.post("/demo/echo", json={"message": "one more"}, headers=tenant)
    other_tenant = await api.post("/demo/echo", json={"message": "fine"})
    listed = await api.get("/jobs", headers=tenant)

    assert set_cap.status_code == 200, set_cap.text
    assert set_cap.json() == {"tenant_id": "capped", "max_queued": 2}
    assert refused.status_code == 429, refused.text
    error = refused.json()["error"]
    assert error["code"] == "queued_cap"
    assert error["details"] == [{"cap": 2}]
    assert "max_queued" in error["message"]
    assert refused.headers["Retry-After"] == "5"
    assert other_tenant.status_code == 202
    assert sorted(job["id"] for job in listed.json()["items"]) == sorted(waiting)

    # A waiting job that leaves the line (here: cancelled) makes room for the next.
    cancelled = await api.post(f"/jobs/{waiting[0]}/cancel", headers=tenant)
    assert cancelled.status_code == 200, cancelled.text
    accepted = await api.post("/demo/echo", json={"message": "room"}, headers=tenant)
    assert accepted.status_code == 202, accepted.text


async def test_a_cap_is_removed_with_null_and_refused_when_out_of_range(api: ApiClient) -> None:
    admin = await api.auth("ops", admin=True)
    tenant = await api.auth("capped")
    await api.put("/admin/tenants/capped/max-queued", json={"max_queued": 1}, headers=admin)
    await _later(api, "capped")
    assert (await api.post("/demo/echo", json={"message": "m"}, headers=tenant)).status_code == 429

    removed = await api.put(
        "/admin/tenants/capped/max-queued", json={"max_queued": None}, headers=admin
    )
    zero = await api.put("/admin/tenants/capped/max-queued", json={"max_queued": 0}, headers=admin)
    unknown = await api.put(
        "/admin/tenants/nobody/max-queued", json={"max_queued": 5}, headers=admin
    )
    not_admin = await api.put(
        "/admin/tenants/capped/max-queued", json={"max_queued": 5}, headers=tenant
    )

    assert removed.json() == {"tenant_id": "capped", "max_queued": None}
    assert (await api.post("/demo/echo", json={"message": "m"}, headers=tenant)).status_code == 202
    assert zero.status_code == 422
    assert unknown.status_code == 404
    assert unknown.json()["error"]["code"] == "not_found"
    assert not_admin.status_code == 403
