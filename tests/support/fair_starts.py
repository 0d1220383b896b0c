"""A job type whose handler writes down, at its first line, that it started and for
which tenant, then works for `work_s`: the order of the lines is the order the jobs
started in. Workers load it with ``JOBRAIL_APP=tests.support.fair_starts:rail``; the
embedded tests take `module`.

Each start is one line (``<tenant> <job id>``) appended to the file the payload names
with O_APPEND, so that the lines of worker processes on this machine land in one file,
in the order they were written, and never interleave."""

import asyncio

from pydantic import BaseModel

from jobrail import JobContext, JobRail, Module, job
from tests.support.lines import append_line


class Step(BaseModel):
    path: str
    work_s: float = 0.0


@job("test.fair_step", payload=Step)
async def fair_step(payload: Step, ctx: JobContext) -> None:
    append_line(payload.path, f"{ctx.tenant_id} {ctx.job_id}\n")
    await asyncio.sleep(payload.work_s)


class UserStep(Step):
    user: str


@job("test.fair_user_step", payload=UserStep, fair_key="{user}")
async def fair_user_step(payload: UserStep, ctx: JobContext) -> None:
    """As test.fair_step, one line per user inside its tenant's share; it writes the
    user where fair_step writes the tenant."""
    append_line(payload.path, f"{payload.user} {ctx.job_id}\n")
    await asyncio.sleep(payload.work_s)


def started(path: str) -> list[tuple[str, str]]:
    """(tenant, job id) of each start written to `path` so far, in the order written."""
    try:
        with open(path) as lines:  # noqa: PTH123 - a test helper's plain read
            return [(t, j) for t, j in (line.split() for line in lines if line.strip())]
    except FileNotFoundError:
        return []


module = Module(name="fair_starts", jobs=[fair_step, fair_user_step])
rail = JobRail(modules=[module])
