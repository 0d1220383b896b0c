"""Batches and chains on the ops page, in embedded mode (SQLite, the in-process worker):
the list of recent ones with the counts `GET /batches/{id}` has, a flow's page with its
callbacks and members, a job's page with its flow and its progress, all behind the
page's sign-in and escaped. (tests/integration/test_ops_flows_pg.py: the same on
Postgres.)"""

import re
import uuid
from typing import Any

from sqlalchemy import update
from sqlalchemy.ext.asyncio import AsyncEngine

from jobrail.jobs.flow_service import FlowService
from jobrail.jobs.workflows import BatchCommand, ChainCommand, FlowJob
from jobrail.kernel.ids import TenantId
from jobrail.runtime.app import runtime_of
from jobrail.store.tables import jobs
from tests.support.fixtures import ApiClient
from tests.support.ops_pages import fields, has_table, rows, texts
from tests.support.services import wait_for

CSRF = re.compile(r'name=csrf_token value="([^"]+)"')
COUNTS = ("total", "pending", "running", "succeeded", "failed", "cancelled")


async def _finished(
    api: ApiClient, path: str, headers: dict[str, str] | None = None
) -> dict[str, Any]:
    async def done() -> dict[str, Any] | None:
        body: dict[str, Any] = (await api.get(path, headers=headers)).json()
        return body if body.get("finished_at") else None

    found: dict[str, Any] = await wait_for(done, timeout=20, what=f"{path} to finish")
    return found


async def _page(api: ApiClient, path: str, status: int = 200) -> str:
    response = await api.get(path)
    assert response.status_code == status, response.text
    assert response.headers["Cache-Control"] == "no-store"
    assert "default-src 'none'" in response.headers["Content-Security-Policy"]
    return response.text


async def _flows(api: ApiClient) -> FlowService:
    return await runtime_of(api.app).container.get(FlowService)


async def test_the_ops_page_lists_the_newest_batches_and_chains_with_their_counts(
    api: ApiClient,
) -> None:
    batch = (await api.post("/demo/batch", json={"count": 3, "fail_times": 5})).json()
    await _finished(api, f"/batches/{batch['batch_id']}")
    acme = await api.auth("acme")
    chain = (
        await (await _flows(api)).chain(
            ChainCommand(
                tenant_id=TenantId("acme"),
                steps=[FlowJob("demo.echo", {"message": "one"})] * 2,
                name="nightly",
            )
        )
    ).flow
    await _finished(api, f"/chains/{chain.id}", acme)

    page = await _page(api, "/ops")
    listed = texts(page, "flows")

    assert [(r["kind"], r["name"], r["tenant"]) for r in listed] == [
        ("chain", "nightly", "acme"),
        ("batch", "demo batch", "demo"),
    ]
    by_api = [
        (await api.get(f"/chains/{chain.id}", headers=acme)).json(),
        (await api.get(f"/batches/{batch['batch_id']}")).json(),
    ]
    for row, body in zip(listed, by_api, strict=True):
        assert {name: int(row[name]) for name in COUNTS} == body["counts"]
        assert row["status"] == body["status"]
        assert row["created"] == body["created_at"][:19].replace("T", " ")
        assert row["finished"] == body["finished_at"][:19].replace("T", " ")
    assert listed[0]["succeeded"] == "2"
    assert listed[1]["failed"] == "3"
    # The failures of its members link to their jobs' pages.
    failed = sorted(row["type"].links[0] for row in rows(page, "failures"))
    assert failed == sorted(f"/ops/jobs/{job_id}" for job_id in batch["job_ids"])


async def test_the_list_shows_the_twenty_newest(api: ApiClient) -> None:
    flows = await _flows(api)
    started = [
        await flows.batch(
            BatchCommand(
                tenant_id=TenantId("demo"),
                jobs=[FlowJob("demo.echo", {"message": "m"})],
                name=f"b{n}",
            )
        )
        for n in range(21)
    ]

    listed = rows(await _page(api, "/ops"), "flows")

    assert [row["name"].text for row in listed] == [f"b{n}" for n in range(20, 0, -1)]
    assert listed[0]["name"].links == [f"/ops/flows/{started[-1].flow.id}"]


async def test_a_flows_page_shows_its_counts_callbacks_and_members_linked_to_their_jobs(
    api: ApiClient,
) -> None:
    batch = (await api.post("/demo/batch", json={"count": 2, "fail_times": 5})).json()
    body = await _finished(api, f"/batches/{batch['batch_id']}")

    page = await _page(api, f"/ops/flows/{batch['batch_id']}")

    info = fields(page, "flow")
    assert info["kind"].text == "batch"
    assert info["name"].text == "demo batch"
    assert info["status"].text == "failed"
    assert info["tenant"].text == "demo"
    [counts] = texts(page, "flow-counts")
    assert {name: int(counts[name]) for name in COUNTS} == body["counts"]
    [then] = rows(page, "callbacks")
    assert then["role"].text == "then"
    assert then["job"].links == [f"/ops/jobs/{batch['then_job_id']}"]
    assert then["status"].text == "cancelled"
    members = rows(page, "members")
    assert [m["job"].links for m in members] == [[f"/ops/jobs/{i}"] for i in batch["job_ids"]]
    assert [m["#"].text for m in members] == ["0", "1"]
    assert {m["status"].text for m in members} == {"failed"}
    assert all("asked to fail" in m["error"].text for m in members)
    assert "Refreshes" not in page  # a finished flow does not change
    assert "/cancel" not in page  # the console has no actions besides signing out


async def test_a_flows_page_shows_its_first_hundred_members(api: ApiClient) -> None:
    started = await (await _flows(api)).batch(
        BatchCommand(
            tenant_id=TenantId("demo"),
            jobs=[FlowJob("demo.echo", {"message": "m", "sleep_ms": 60_000})] * 101,
        )
    )

    page = await _page(api, f"/ops/flows/{started.flow.id}")

    members = rows(page, "members")
    assert len(members) == 100
    assert [m["#"].text for m in members] == [str(n) for n in range(100)]
    assert "The first 100 of 101." in page
    assert "Refreshes every" in page  # still running
    await api.post(f"/batches/{started.flow.id}/cancel")


async def test_a_jobs_page_shows_its_flow_and_its_progress(api: ApiClient) -> None:
    batch = (await api.post("/demo/batch", json={"count": 1, "sleep_ms": 300})).json()
    await _finished(api, f"/batches/{batch['batch_id']}")
    [member_id] = batch["job_ids"]
    job = await api.job(member_id)

    page = await _page(api, f"/ops/jobs/{member_id}")

    info = fields(page, "job")
    assert info["status"].text == "succeeded"
    assert info["type"].text == "demo.echo"
    assert info["flow"].links == [f"/ops/flows/{batch['batch_id']}"]
    assert info["flow"].text == "batch demo batch: member, step 0"
    progress = fields(page, "progress")
    assert progress["current"].text == str(job["progress"]["current"]) == "300"
    assert progress["total"].text == "300"
    assert progress["message"].text == "sleeping"
    plain = await _page(api, f"/ops/jobs/{await api.echo()}")
    assert "flow" not in fields(plain, "job")
    assert not has_table(plain, "progress")
    # The flow's page links back to the job.
    flow_page = await _page(api, info["flow"].links[0])
    assert [m["job"].links for m in rows(flow_page, "members")] == [[f"/ops/jobs/{member_id}"]]


async def test_what_tenants_wrote_is_escaped_on_every_page(api: ApiClient) -> None:
    # A chain's second step waits (blocked) while its first runs: nothing else writes it.
    started = await (await _flows(api)).chain(
        ChainCommand(
            tenant_id=TenantId("demo"),
            steps=[FlowJob("demo.echo", {"message": "m", "sleep_ms": 60_000})] * 2,
            name="<script>alert(1)</script>",
        )
    )
    member = started.members[1]
    engine = await runtime_of(api.app).container.get(AsyncEngine)
    async with engine.begin() as conn:
        await conn.execute(
            update(jobs)
            .where(jobs.c.id == member.id)
            .values(
                progress={
                    "current": 1,
                    "total": 2,
                    "message": '<img src=x onerror="alert(1)">',
                    "updated_at": "2026-12-02T00:00:00+00:00",
                },
                last_error="<b>boom</b>",
            )
        )

    pages = [
        await _page(api, "/ops"),
        await _page(api, f"/ops/flows/{started.flow.id}"),
        await _page(api, f"/ops/jobs/{member.id}"),
    ]

    for page in pages:
        assert "<script>" not in page
        assert "<img" not in page
        assert "<b>boom" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in pages[0]
    assert "1 / 2 &lt;img" in pages[1]
    assert fields(pages[2], "progress")["message"].text == '<img src=x onerror="alert(1)">'
    await api.post(f"/chains/{started.flow.id}/cancel")


async def test_the_flow_and_job_pages_want_an_admin_and_know_what_they_do_not_have(
    api: ApiClient,
) -> None:
    batch = (await api.post("/demo/batch", json={"count": 1})).json()
    paths = [f"/ops/flows/{batch['batch_id']}", f"/ops/jobs/{batch['then_job_id']}"]
    tenant = await api.auth("acme")
    admin_key = api.headers.pop("Authorization")

    for path in paths:
        anonymous = await api.get(path)
        assert anonymous.status_code == 401
        assert "id=api_key" in anonymous.text  # the sign-in form
        assert batch["batch_id"] not in anonymous.text
        not_admin = await api.get(path, headers=tenant)
        assert not_admin.status_code == 403
        assert "not an admin key" in not_admin.text
        assert not_admin.headers["X-Frame-Options"] == "DENY"

    # Signed in with the form, as a browser is: the pages carry the sign-out form.
    form = await api.get("/ops")
    csrf = CSRF.search(form.text)
    assert csrf
    login = await api.post(
        "/ops/login", data={"api_key": admin_key.removeprefix("Bearer "), "csrf_token": csrf[1]}
    )
    assert login.status_code == 303
    for path in paths:
        page = await _page(api, path)
        assert "id=sign-out" in page
    missing = uuid.uuid4()
    for path in (f"/ops/flows/{missing}", f"/ops/jobs/{missing}", "/ops/jobs/not-an-id"):
        assert "id=not-found" in await _page(api, path, status=404)
    # A member's page is not a flow's, nor the other way round.
    assert "id=not-found" in await _page(api, f"/ops/flows/{batch['job_ids'][0]}", status=404)
    assert "id=not-found" in await _page(api, f"/ops/jobs/{batch['batch_id']}", status=404)
