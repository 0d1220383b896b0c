"""A job type's own max_attempts holds for its unexpected errors too, in a running rail:
the retry policy the container makes knows which types declare one."""

from pathlib import Path

from pydantic import BaseModel

from jobrail import JobContext, JobRail
from jobrail.jobs.domain import Job
from jobrail.jobs.get import GetJob, GetJobQuery
from jobrail.kernel.ids import JobId, TenantId
from tests.api.conftest import embedded_settings, migrated
from tests.support.services import wait_for


class Parse(BaseModel):
    text: str


async def _finished(rail: JobRail, job_id: JobId) -> Job:
    async def done() -> Job | None:
        async with rail.container() as scope:
            job = await (await scope.get(GetJob))(GetJobQuery(TenantId("acme"), job_id))
        return job if job.finished_at is not None else None

    finished: Job = await wait_for(done, timeout=30, what=f"job {job_id} to finish")
    return finished


async def test_a_value_error_gets_the_types_own_attempts_or_else_the_platforms(
    tmp_path: Path,
) -> None:
    settings = embedded_settings(
        tmp_path,
        modules=[],
        scheduler={"embedded": False},
        retry={"base_s": 0.01, "jitter": "none", "max_attempts": 5, "max_attempts_unknown": 3},
    )
    rail = JobRail(await migrated(settings))

    @rail.job("test.parse_with_four_attempts", payload=Parse, max_attempts=4)
    async def parse_with_four_attempts(payload: Parse, ctx: JobContext) -> None:
        int(payload.text)

    @rail.job("test.parse", payload=Parse)
    async def parse(payload: Parse, ctx: JobContext) -> None:
        int(payload.text)

    async with rail.lifespan():
        own = (await parse_with_four_attempts.enqueue(Parse(text="x"), tenant_id="acme")).job
        platforms = (await parse.enqueue(Parse(text="x"), tenant_id="acme")).job
        own = await _finished(rail, own.id)
        platforms = await _finished(rail, platforms.id)

    assert (own.status.value, own.attempts) == ("failed", 4)
    assert (platforms.status.value, platforms.max_attempts, platforms.attempts) == ("failed", 5, 3)
