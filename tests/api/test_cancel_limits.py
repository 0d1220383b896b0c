"""A cancel is charged to the tenant's read budget, not its enqueue budget: it enqueues
nothing, and an operator cancelling a backlog must not be refused after the enqueue
limit's 30 a minute. Cancels are still limited, by the read rules."""

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Annotated, Any

import httpx
from fastapi import FastAPI, Header

from jobrail import JobRail
from jobrail.jobs.enqueue import EnqueueJob, EnqueueJobCommand
from jobrail.jobs.flow_service import FlowService
from jobrail.jobs.workflows import BatchCommand, ChainCommand, FlowJob
from jobrail.kernel.ids import TenantId
from jobrail.runtime.app import create_app, runtime_of
from tests.api.conftest import embedded_settings, migrated
from tests.support.apps import REFERENCE
from tests.support.fixtures import ApiClient
from tests.support.host_app import RenderReport, declare_jobs

ENQUEUE_30_PER_MINUTE = {"enqueue": [{"scope": "tenant", "limit": 30, "window_s": 60}]}
LATER = datetime.now(UTC) + timedelta(hours=1)


@asynccontextmanager
async def _api(tmp_path: Path, **limits: Any) -> AsyncIterator[ApiClient]:
    settings = embedded_settings(
        tmp_path, api_limits={**ENQUEUE_30_PER_MINUTE, **limits}, worker={"shutdown_grace_s": 0.2}
    )
    app = create_app(await migrated(settings), modules=REFERENCE)
    client = ApiClient(transport=httpx.ASGITransport(app=app), base_url="http://api")
    client.app = app
    async with app.router.lifespan_context(app), client:
        yield await client.sign_in("acme")


async def _waiting_jobs(api: ApiClient, count: int) -> list[str]:
    """Jobs that wait an hour to run, enqueued past the API (and its limits)."""
    ids = []
    async with runtime_of(api.app).container() as request:
        enqueue = await request.get(EnqueueJob)
        for n in range(count):
            command = EnqueueJobCommand(
                tenant_id=TenantId(api.tenant_id),
                type="demo.echo",
                payload={"message": f"m{n}"},
                run_after=LATER,
            )
            ids.append(str((await enqueue(command)).job.id))
    return ids


async def test_forty_cancels_in_a_row_are_answered_under_an_enqueue_limit_of_30(
    tmp_path: Path,
) -> None:
    async with _api(tmp_path) as api:
        jobs = await _waiting_jobs(api, 40)

        answers = [await api.post(f"/jobs/{job_id}/cancel") for job_id in jobs]

        assert [answer.status_code for answer in answers] == [200] * 40
        assert {answer.json()["status"] for answer in answers} == {"cancelled"}
        # The enqueue budget is untouched: 30 enqueues still go through.
        enqueued = [(await api.post("/demo/echo", json={"message": "m"})) for _ in range(30)]
        assert [answer.status_code for answer in enqueued] == [202] * 30


async def test_cancels_spend_the_read_budget(tmp_path: Path) -> None:
    read_5 = [{"scope": "tenant", "limit": 5, "window_s": 60}]
    async with _api(tmp_path, read=read_5) as api:
        jobs = await _waiting_jobs(api, 6)

        answers = [await api.post(f"/jobs/{job_id}/cancel") for job_id in jobs]

        assert [answer.status_code for answer in answers] == [200] * 5 + [429]
        assert answers[0].headers["RateLimit-Limit"] == "5"
        assert answers[-1].json()["error"]["code"] == "rate_limited"
        assert "per tenant" in answers[-1].json()["error"]["message"]


async def test_a_batch_or_chain_is_cancelled_once_the_enqueue_budget_is_spent(
    tmp_path: Path,
) -> None:
    async with _api(tmp_path) as api:
        async with runtime_of(api.app).container() as request:
            flows = await request.get(FlowService)
            sleeping = FlowJob("demo.echo", {"message": "m", "sleep_ms": 60_000})
            tenant = TenantId(api.tenant_id)
            batch = await flows.batch(BatchCommand(tenant_id=tenant, jobs=[sleeping]))
            chain = await flows.chain(ChainCommand(tenant_id=tenant, steps=[sleeping, sleeping]))
        [job_id] = await _waiting_jobs(api, 1)
        spent = [(await api.post("/demo/echo", json={"message": "m"})) for _ in range(31)]
        assert spent[-1].status_code == 429

        cancelled = [
            await api.post(f"/batches/{batch.flow.id}/cancel"),
            await api.post(f"/chains/{chain.flow.id}/cancel"),
            await api.post(f"/jobs/{job_id}/cancel"),
        ]

        assert [answer.status_code for answer in cancelled] == [200, 200, 200]


async def _host_tenant(x_tenant: Annotated[str, Header()]) -> TenantId:
    return TenantId(x_tenant)


async def test_the_rails_router_answers_forty_cancels_under_an_enqueue_limit_of_30(
    tmp_path: Path,
) -> None:
    settings = embedded_settings(tmp_path, modules=[], api_limits=ENQUEUE_30_PER_MINUTE)
    rail = JobRail(await migrated(settings))
    render = declare_jobs(rail)
    app = FastAPI(lifespan=rail.lifespan)
    app.include_router(rail.router(tenant=_host_tenant))
    transport = httpx.ASGITransport(app=app)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=transport, base_url="http://host") as http,
    ):
        jobs = [
            (
                await render.enqueue(
                    RenderReport(report_id=f"r-{n}"), tenant_id="acme", run_after=LATER
                )
            ).job.id
            for n in range(40)
        ]

        answers = [
            await http.post(f"/jobs/{job_id}/cancel", headers={"X-Tenant": "acme"})
            for job_id in jobs
        ]

    assert [answer.status_code for answer in answers] == [200] * 40
