"""A job type held to a token bucket (capacity 5, 5 a second) whose handler writes down,
at its very first line, when it started: the moment a vendor behind that bucket would
be called. Workers load it with ``JOBRAIL_APP=tests.support.bucket_starts:rail``; the
embedded tests take `module`.

Each start is one line of the file the payload names (``<time.time()> <job id>``), so
that worker processes on this machine write to one place with one clock. Lines are
short and written with O_APPEND: lines of concurrent writers do not interleave.

The bucket reads the environment at import (``JOBRAIL_TEST_BUCKET_CAPACITY``,
``JOBRAIL_TEST_BUCKET_PER_SECOND``), so that a measurement can try others."""

import asyncio
import os
import time

from pydantic import BaseModel

from jobrail import JobContext, JobRail, Module, TokenBucket, job
from tests.support.lines import append_line

CAPACITY = float(os.environ.get("JOBRAIL_TEST_BUCKET_CAPACITY", "5"))
PER_SECOND = float(os.environ.get("JOBRAIL_TEST_BUCKET_PER_SECOND", "5"))


class Start(BaseModel):
    path: str
    n: int = 0


@job(
    "test.bucket_start",
    payload=Start,
    limits=[
        TokenBucket("vendor", key="vendor:{tenant_id}", capacity=CAPACITY, per_second=PER_SECOND)
    ],
)
async def bucket_start(payload: Start, ctx: JobContext) -> None:
    started = time.time()
    await asyncio.to_thread(append_line, payload.path, f"{started!r} {ctx.job_id}\n")


def starts(path: str) -> list[float]:
    """The start times written to `path` so far, sorted."""
    try:
        with open(path) as lines:  # noqa: PTH123 - a test helper's plain read
            return sorted(float(line.split()[0]) for line in lines if line.strip())
    except FileNotFoundError:
        return []


module = Module(name="bucket_starts", jobs=[bucket_start])
rail = JobRail(modules=[module])
