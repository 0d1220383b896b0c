"""A 200-job batch through 20 SIGKILLs of its workers, with every message delivered
twice: exact counts, and the `then` callback run once."""

import asyncio
import random
import time
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from jobrail.jobs.domain import FlowRole
from jobrail.jobs.flow_service import FlowService
from jobrail.jobs.workflows import BatchCommand, FlowJob
from jobrail.kernel.ids import TenantId
from jobrail.runtime.app import runtime_of
from jobrail.store.tables import flows, jobs
from tests.faults.conftest import job_counts, republish_all, wait_all_terminal
from tests.support.fixtures import ApiClient
from tests.support.processes import Process
from tests.support.rabbit import RabbitProbe
from tests.support.recorder import Recorder
from tests.support.services import wait_for

MEMBERS, KILLS = 200, 20
WORKER = {"JOBRAIL_WORKER__MAX_ASYNC_TASKS": "4", "JOBRAIL_RABBIT__PREFETCH": "4"}


async def _status(engine: AsyncEngine, job_id: object) -> str:
    async with engine.connect() as conn:
        return str(await conn.scalar(select(jobs.c.status).where(jobs.c.id == job_id)))


async def test_twenty_sigkills_during_a_200_job_batch_run_its_then_callback_once(
    api: ApiClient,
    spawn_worker: Any,
    workers: Any,
    recorder: Recorder,
    rabbit: RabbitProbe,
    engine: AsyncEngine,
    report: Any,
) -> None:
    pool: list[Process] = [await workers(f"w{n}", **WORKER) for n in range(2)]
    flows_service = await runtime_of(api.app).container.get(FlowService)
    effect = {"url": recorder.url, "sleep_ms": 1500}
    started = await flows_service.batch(
        BatchCommand(
            tenant_id=TenantId(api.tenant_id),
            jobs=[FlowJob("test.effect", effect) for _ in range(MEMBERS)],
            then=FlowJob("test.effect", {"url": recorder.url}),
        )
    )
    then_id = started.callbacks[FlowRole.THEN].id
    copies = await republish_all(rabbit, engine)  # every message twice, the callback's too

    rng = random.Random(14)
    for kill in range(KILLS):
        await wait_for(
            lambda: _running_members(engine), timeout=30, interval=0.05, what="a member running"
        )
        # Every kill lands while the batch is still running: its callback still waits.
        assert await _status(engine, then_id) == "blocked"
        victim = rng.randrange(len(pool))
        pool[victim].kill()
        pool[victim] = spawn_worker(f"w{victim}-after-kill-{kill}", **WORKER)
        await asyncio.sleep(rng.uniform(0.4, 0.9))
    last_kill = time.monotonic()

    done_at = await wait_all_terminal(engine, MEMBERS + 1, timeout=240)
    again = await republish_all(rabbit, engine)  # and once more after the end
    await asyncio.sleep(3)  # time for the copies to arrive and be acknowledged

    counts = await job_counts(engine)
    async with engine.connect() as conn:
        flow = (await conn.execute(select(flows).where(flows.c.id == started.flow.id))).one()
        then = (await conn.execute(select(jobs).where(jobs.c.id == then_id))).one()
        members_by_status = dict(
            (
                await conn.execute(
                    select(jobs.c.status, func.count())
                    .where(jobs.c.flow_id == started.flow.id, jobs.c.flow_role == "member")
                    .group_by(jobs.c.status)
                )
            ).all()
        )
    effects = recorder.effects()
    member_ids = {str(job.id) for job in started.members}

    assert counts == {"succeeded": MEMBERS + 1}, counts
    assert members_by_status == {"succeeded": MEMBERS}
    assert (flow.status, flow.succeeded, flow.failed, flow.cancelled, flow.total) == (
        "succeeded",
        MEMBERS,
        0,
        0,
        MEMBERS,
    )
    # The callback: released once, claimed once, one effect.
    assert then.attempts == 1
    assert effects[str(then_id)] == 1
    # Every member's effect was made (a repeat only ever under its own key).
    assert set(effects) == member_ids | {str(then_id)}
    report(
        scenario="sigkill x20, 200-job batch, 2 workers",
        jobs=MEMBERS + 1,
        succeeded=counts["succeeded"],
        lost=0,
        duplicated=0,
        redeliveries_absorbed=copies + again,
        recover_s=round(done_at - last_kill, 1),
        notes=f"then-callback effects={effects[str(then_id)]}, "
        f"member effects repeated={sum(effects.values()) - len(effects)}",
    )


async def _running_members(engine: AsyncEngine) -> int:
    return (await job_counts(engine)).get("running", 0)
