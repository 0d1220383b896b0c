"""The benchmark's job type: a no-op behind a rate limit that never binds and a lock."""

from pydantic import BaseModel

from jobrail import JobContext, JobRail, Lock, Module, TokenBucket, job


class Noop(BaseModel):
    n: int


@job(
    "bench.noop",
    payload=Noop,
    limits=[TokenBucket("bench", key="bench:{tenant_id}", capacity=1e9, per_second=1e9)],
    lock=Lock(key="bench:{n}", ttl_s=30),
)
async def noop(payload: Noop, ctx: JobContext) -> None:
    return None


module = Module(name="bench", jobs=[noop])

rail = JobRail(modules=[module])
"""What the bench's processes run (``JOBRAIL_APP=bench.jobs:rail``)."""
