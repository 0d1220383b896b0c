"""Cancelling a running job in the embedded mode stops its handler, however it waits."""

import asyncio
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from jobrail.jobs.flow_service import FlowService
from jobrail.jobs.workflows import BatchCommand, FlowJob
from jobrail.kernel.ids import JobId, TenantId
from jobrail.runtime.app import create_app, runtime_of
from jobrail.worker.context import JobContext
from tests.api.conftest import embedded_settings, migrated
from tests.support.apps import reference_and_test_jobs
from tests.support.cancel_jobs import Way, marked
from tests.support.cancelling import TERMINAL, cancel_running, silent_server, wait_marked
from tests.support.fixtures import ApiClient


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[ApiClient]:
    settings = embedded_settings(tmp_path, worker={"shutdown_grace_s": 0.5})
    app = create_app(await migrated(settings), modules=reference_and_test_jobs.modules)
    client = ApiClient(transport=httpx.ASGITransport(app=app), base_url="http://api")
    client.app = app
    async with app.router.lifespan_context(app), client:
        yield client.sign_in_with("demo", "demo-key")


@pytest.mark.parametrize("way", ["spin", "sleep", "shielded"])
async def test_a_running_job_that_never_checkpoints_is_stopped_by_its_cancel(
    api: ApiClient, tmp_path: Path, way: Way
) -> None:
    await cancel_running(api, tmp_path, way)


async def test_a_job_waiting_on_an_http_call_is_stopped_by_its_cancel(
    api: ApiClient, tmp_path: Path
) -> None:
    with silent_server() as url:
        await cancel_running(api, tmp_path, "http", url)


async def test_cancelling_a_batch_stops_its_running_members(api: ApiClient, tmp_path: Path) -> None:
    members = [
        FlowJob("test.cancellable", {"way": "sleep", "marks": str(tmp_path), "resource": f"b{n}"})
        for n in range(2)
    ]
    async with runtime_of(api.app).container() as request:
        flows = await request.get(FlowService)
        started = await flows.batch(BatchCommand(tenant_id=TenantId("demo"), jobs=members))
    job_ids = [str(job.id) for job in started.members]
    for job_id in job_ids:
        await wait_marked(tmp_path, job_id, "started")

    answer = await api.post(f"/batches/{started.flow.id}/cancel")

    assert answer.status_code == 200, answer.text
    for job_id in job_ids:
        job = await api.wait_status(job_id, *TERMINAL, timeout=20)
        assert job["status"] == "cancelled", job
        assert marked(tmp_path, job_id, "cleanup")


async def test_a_shielded_step_runs_to_its_end_and_the_handler_stops_after_it() -> None:
    """`JobContext.shielded` without a worker: the step's task outlives the cancel, the
    caller's does not go past it."""
    ctx = JobContext(
        job_id=JobId(uuid.uuid4()),
        job_type="t",
        tenant_id=TenantId("t"),
        attempt=1,
        max_attempts=1,
        _store=None,
    )  # type: ignore[arg-type]
    steps: list[str] = []
    entered = asyncio.Event()

    async def step() -> None:
        entered.set()
        await asyncio.sleep(0.2)
        steps.append("step done")

    async def handler() -> None:
        await ctx.shielded(step())
        steps.append("after the step")

    task = asyncio.create_task(handler())
    await entered.wait()
    task.cancel()

    with pytest.raises(asyncio.CancelledError):
        await task
    assert steps == ["step done"]
