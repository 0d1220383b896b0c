"""A host's module whose job type names a queue the settings do not configure: what
`jobrail worker --app` must refuse in one line before any worker process starts."""

from pydantic import BaseModel

from jobrail import JobContext, JobRail

rail = JobRail()


class Nothing(BaseModel):
    pass


@rail.job("host.misrouted", payload=Nothing, queue="jobs.nope")
async def misrouted(payload: Nothing, ctx: JobContext) -> None:
    return None
