"""A host app's job type, declared on its own JobRail (the README's example)."""

from pydantic import BaseModel

from jobrail import JobContext, JobHandle, JobRail, Lock, TokenBucket


class RenderReport(BaseModel):
    report_id: str
    pages: int = 1
    permanent_failure: bool = False


def declare_jobs(rail: JobRail) -> JobHandle[RenderReport]:
    @rail.job(
        "reports.render",
        payload=RenderReport,
        limits=[TokenBucket("render", key="render:{tenant_id}", capacity=50, per_second=50)],
        lock=Lock(key="report:{tenant_id}:{report_id}", ttl_s=30),
        max_attempts=6,
    )
    async def render(payload: RenderReport, ctx: JobContext) -> dict[str, int]:
        if payload.permanent_failure:
            from jobrail import PermanentError

            raise PermanentError("the report cannot be rendered")
        return {"pages": payload.pages, "attempt": ctx.attempt}

    return render
