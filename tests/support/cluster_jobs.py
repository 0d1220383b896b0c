"""A job type a Redis Cluster cannot run: its lock and its slots have different owners
(``resource:{resource}`` by resource, ``pool:{tenant_id}`` by tenant), so no hash slot
holds both, and its admission is one script. Loaded only by the tests of that refusal."""

from pydantic import BaseModel

from jobrail import Concurrency, JobContext, Lock, Module, job


class Split(BaseModel):
    resource: str


@job(
    "cluster.split",
    payload=Split,
    lock=Lock(key="resource:{resource}"),
    limits=[Concurrency("slots", key="pool:{tenant_id}", slots=8)],
)
async def split(payload: Split, ctx: JobContext) -> None:
    return None


module = Module(name="cluster_jobs", jobs=[split])
