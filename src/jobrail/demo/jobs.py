import asyncio

from pydantic import BaseModel, ConfigDict, Field

from jobrail.jobs.context import JobContext
from jobrail.jobs.registry import job
from jobrail.kernel.errors import PermanentError, TransientError

CHECKPOINT_EVERY_S = 0.25


class EchoPayload(BaseModel):
    # Strict like every request body (jobrail.api.schemas.RequestModel): "yes" is no boolean.
    model_config = ConfigDict(extra="forbid", strict=True)

    message: str = Field(max_length=10_000)
    sleep_ms: int = Field(default=0, ge=0, le=3_600_000)
    fail_times: int = Field(
        default=0, ge=0, le=100, description="Fail this many attempts before succeeding."
    )
    permanent: bool = Field(
        default=False, description="Fail the first attempt with a permanent error instead."
    )


@job("demo.echo", payload=EchoPayload, queue="jobs.default", timeout_s=30)
async def echo(payload: EchoPayload, ctx: JobContext) -> dict[str, str]:
    """Sleep, fail as asked, then echo the message back as the job's result."""
    remaining = payload.sleep_ms / 1000
    while remaining > 0:
        await asyncio.sleep(min(remaining, CHECKPOINT_EVERY_S))
        remaining -= CHECKPOINT_EVERY_S
        await ctx.checkpoint()
    if payload.permanent:
        raise PermanentError("asked to fail permanently")
    if ctx.attempt <= payload.fail_times:
        raise TransientError(
            f"asked to fail {payload.fail_times} time(s); this was attempt {ctx.attempt}"
        )
    return {"echo": payload.message}
