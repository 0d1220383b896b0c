"""Batches and chains on the ops page in stack mode (Postgres): the list, a flow's page and
a job's page show what the jobs table holds, counted as `GET /batches/{id}` counts.
No worker runs: the members' ends are written into the jobs table by the test, so the
counts are the table's and not the flow row's. (tests/api/test_ops_flows.py: the same
pages on SQLite, with a worker.)"""

from collections.abc import Callable
from typing import Any

from sqlalchemy import update
from sqlalchemy.ext.asyncio import AsyncEngine

from jobrail.jobs.domain import FlowRole
from jobrail.jobs.flow_service import FlowService
from jobrail.jobs.workflows import BatchCommand, ChainCommand, FlowJob
from jobrail.kernel.ids import TenantId
from jobrail.runtime.app import runtime_of
from jobrail.settings import Settings
from jobrail.store.tables import jobs
from tests.support.ops_pages import fields, rows, texts
from tests.support.rabbit import RabbitProbe

COUNTS = ("total", "pending", "running", "succeeded", "failed", "cancelled")


async def test_the_ops_pages_show_batches_and_chains_as_the_jobs_table_has_them(
    stack_settings: Settings,
    rabbit: RabbitProbe,
    make_api: Callable[[Settings], Any],
    engine: AsyncEngine,
) -> None:
    async with make_api(stack_settings) as api:
        admin = await api.auth("ops", admin=True)
        flows = await runtime_of(api.app).container.get(FlowService)
        echo = FlowJob("demo.echo", {"message": "m"})
        batch = await flows.batch(
            BatchCommand(
                tenant_id=TenantId("default"), jobs=[echo] * 4, then=echo, name="month end"
            )
        )
        chain = await flows.chain(
            ChainCommand(tenant_id=TenantId("default"), steps=[echo] * 3, name="nightly")
        )
        first, second = batch.members[:2]
        async with engine.begin() as conn:
            await conn.execute(update(jobs).where(jobs.c.id == first.id).values(status="succeeded"))
            await conn.execute(
                update(jobs)
                .where(jobs.c.id == second.id)
                .values(
                    status="running",
                    progress={
                        "current": 2.5,
                        "total": 10,
                        "message": "rows",
                        "updated_at": "2026-12-02T00:00:00+00:00",
                    },
                )
            )

        listed = texts((await api.get("/ops", headers=admin)).text, "flows")
        flow_page = (await api.get(f"/ops/flows/{batch.flow.id}", headers=admin)).text
        job_page = (await api.get(f"/ops/jobs/{second.id}", headers=admin)).text
        by_api = [
            (await api.get(f"/chains/{chain.flow.id}")).json(),
            (await api.get(f"/batches/{batch.flow.id}")).json(),
        ]

    assert [(r["kind"], r["name"], r["status"]) for r in listed] == [
        ("chain", "nightly", "running"),
        ("batch", "month end", "running"),
    ]
    for row, body in zip(listed, by_api, strict=True):
        assert {name: int(row[name]) for name in COUNTS} == body["counts"]
    assert by_api[1]["counts"] == {
        "total": 4,
        "pending": 2,
        "running": 1,
        "succeeded": 1,
        "failed": 0,
        "cancelled": 0,
    }
    assert by_api[0]["counts"]["pending"] == 3  # a chain's blocked steps wait too
    [counts] = texts(flow_page, "flow-counts")
    assert {name: int(counts[name]) for name in COUNTS} == by_api[1]["counts"]
    [then] = rows(flow_page, "callbacks")
    assert then["status"].text == "blocked"
    assert then["job"].links == [f"/ops/jobs/{batch.callbacks[FlowRole.THEN].id}"]
    members = texts(flow_page, "members")
    assert [m["status"] for m in members] == ["succeeded", "running", "pending", "pending"]
    assert members[1]["progress"] == "2.5 / 10 rows"
    info = fields(job_page, "job")
    assert info["flow"].links == [f"/ops/flows/{batch.flow.id}"]
    assert info["flow"].text == "batch month end: member, step 1"
    progress = {name: cell.text for name, cell in fields(job_page, "progress").items()}
    assert progress == {
        "current": "2.5",
        "total": "10",
        "message": "rows",
        "reported": "2026-12-02 00:00:00",
    }
