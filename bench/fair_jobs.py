"""The fair dispatch bench's app (``JOBRAIL_APP=bench.fair_jobs:rail``): the bench's
no-op behind a limit and a lock (``bench.jobs``), and ``bench.stamp``, a no-op that
writes down when it started.

A stamp with a `path` appends one line at its handler's first line, ``<tenant> <job id>
<time.time()>``, with O_APPEND, so that the order of the lines is the order the jobs
started in and the times compare with the clock of the process that enqueued them (one
machine). Without a path it does nothing. Open to tenants: ``POST /jobs`` takes it.
"""

import os
import time

from pydantic import BaseModel

from bench import jobs as bench_jobs
from jobrail import JobContext, JobRail, Module, job


class Stamp(BaseModel):
    path: str | None = None


def append_line(path: str, line: str) -> None:
    """`line` at the end of `path`, in one write (lines of processes never interleave)."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


@job("bench.stamp", payload=Stamp, open_to_tenants=True)
async def stamp(payload: Stamp, ctx: JobContext) -> None:
    if payload.path is not None:
        append_line(payload.path, f"{ctx.tenant_id} {ctx.job_id} {time.time()!r}\n")


def starts(path: str) -> list[tuple[str, float]]:
    """(job id, start time) of each line written to `path` so far, in the order written;
    the lines of ``bench.stamp`` (tenant first) and of the peer (``bench.peer_app``)
    alike."""
    try:
        with open(path) as lines:  # noqa: PTH123 - a bench's plain read
            return [(f[-2], float(f[-1])) for f in (line.split() for line in lines) if f]
    except FileNotFoundError:
        return []


def stamped(path: str) -> list[tuple[str, str, float]]:
    """(tenant, job id, start time) of each ``bench.stamp`` start written to `path` so
    far, in the order written (one read: the three stay together while the file grows)."""
    try:
        with open(path) as lines:  # noqa: PTH123 - a bench's plain read
            return [(f[0], f[1], float(f[2])) for f in (line.split() for line in lines) if f]
    except FileNotFoundError:
        return []


def tenants_in_order(path: str) -> list[str]:
    """The tenant of each ``bench.stamp`` start written to `path`, in the order written."""
    try:
        with open(path) as lines:  # noqa: PTH123 - a bench's plain read
            return [line.split()[0] for line in lines if line.strip()]
    except FileNotFoundError:
        return []


module = Module(name="bench_fair", jobs=[stamp])

rail = JobRail(modules=[bench_jobs.module, module])
"""What the fair dispatch bench's processes run."""
