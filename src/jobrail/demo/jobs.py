import asyncio

from pydantic import BaseModel, ConfigDict, Field

from jobrail.jobs.registry import job
from jobrail.kernel.errors import PermanentError, TransientError
from jobrail.worker.context import JobContext

CHECKPOINT_EVERY_MS = 250


class EchoPayload(BaseModel):
    # Strict like every request body (jobrail.http.schemas.RequestModel): "yes" is no boolean.
    model_config = ConfigDict(extra="forbid", strict=True)

    message: str = Field(max_length=10_000)
    sleep_ms: int = Field(default=0, ge=0, le=3_600_000)
    fail_times: int = Field(
        default=0, ge=0, le=100, description="Fail this many attempts before succeeding."
    )
    permanent: bool = Field(
        default=False, description="Fail the first attempt with a permanent error instead."
    )
    value: int | None = Field(
        default=None, description="A number to return beside the echo (a batch sums them)."
    )


# Its timeout covers its longest sleep (an hour), with a margin: at 30 s, a sleep of a
# minute timed out on every attempt and could never succeed.
# Open to tenants: `POST /jobs {"type": "demo.echo", "payload": {...}}` enqueues it too.
@job("demo.echo", payload=EchoPayload, queue="jobs.default", timeout_s=3_630, open_to_tenants=True)
async def echo(payload: EchoPayload, ctx: JobContext) -> dict[str, str | int]:
    """Sleep (reporting the milliseconds slept as its progress), fail as asked, then echo
    the message back as the job's result."""
    slept_ms = 0
    while slept_ms < payload.sleep_ms:
        step_ms = min(payload.sleep_ms - slept_ms, CHECKPOINT_EVERY_MS)
        await asyncio.sleep(step_ms / 1000)
        slept_ms += step_ms
        await ctx.progress(slept_ms, payload.sleep_ms, "sleeping")
        await ctx.checkpoint()
    if payload.permanent:
        raise PermanentError("asked to fail permanently")
    if ctx.attempt <= payload.fail_times:
        raise TransientError(
            f"asked to fail {payload.fail_times} time(s); this was attempt {ctx.attempt}"
        )
    if payload.value is not None:
        return {"echo": payload.message, "value": payload.value}
    return {"echo": payload.message}


class BatchSumPayload(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


@job("demo.batch_sum", payload=BatchSumPayload, queue="jobs.default", timeout_s=30)
async def batch_sum(payload: BatchSumPayload, ctx: JobContext) -> dict[str, int]:
    """A demo batch's `then` callback: the sum of its members' values."""
    results = await ctx.flow_results()
    values = [r.get("value", 0) for r in results if r is not None]
    return {"sum": sum(v for v in values if isinstance(v, int)), "members": len(results)}
