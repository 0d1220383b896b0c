"""Job types used by the integration tests (workers load them with
JOBRAIL_APP=tests.support.apps:test_jobs).

Their limits read the environment at import, so each test can tune them.
"""

import asyncio
import os
import time
from pathlib import Path

import httpx
from dishka import FromDishka
from pydantic import BaseModel

from jobrail import Concurrency, JobContext, Lock, Module, TokenBucket, TransientError, job
from jobrail.ports import LimitsBackend
from tests.support.cancel_jobs import cancellable

RATE = float(os.environ.get("JOBRAIL_TEST_RATE", "10"))
BURST = float(os.environ.get("JOBRAIL_TEST_BURST", "5"))
LOCK_TTL = float(os.environ.get("JOBRAIL_TEST_LOCK_TTL", "2"))


class Call(BaseModel):
    url: str
    n: int = 0


class Exclusive(BaseModel):
    url: str
    resource: str
    n: int = 0
    hold_ms: int = 20


class Stall(BaseModel):
    url: str
    resource: str
    name: str
    stall_s: float = 0
    stall_on_attempt: int = 1


# One client per worker process, made at import: a vendor client is a pooled,
# long-lived object, and making it per call would put its set-up cost between
# the limiter's admission and the call.
_client = httpx.AsyncClient(timeout=5)


async def _hit(url: str, **params: object) -> None:
    response = await _client.get(url, params=params)
    response.raise_for_status()


@job(
    "test.vendor_call",
    payload=Call,
    limits=[TokenBucket("vendor", key="test-vendor:{tenant_id}", capacity=BURST, per_second=RATE)],
)
async def vendor_call(payload: Call, ctx: JobContext) -> dict[str, int]:
    await _hit(payload.url, n=payload.n, attempt=ctx.attempt, sent=time.time())
    return {"n": payload.n}


@job(
    "test.exclusive",
    payload=Exclusive,
    # Both keys owned by the tenant: one slot in a Redis Cluster (one atomic admission).
    lock=Lock(key="resource:{tenant_id}:{resource}", ttl_s=LOCK_TTL),
    limits=[Concurrency("slots", key="pool:{tenant_id}", slots=8, lease_s=30)],
)
async def exclusive(payload: Exclusive, ctx: JobContext) -> dict[str, int]:
    await _hit(payload.url, phase="start", n=payload.n)
    await asyncio.sleep(payload.hold_ms / 1000)
    await _hit(payload.url, phase="end", n=payload.n)
    return {"n": payload.n}


@job(
    "test.stall",
    payload=Stall,
    lock=Lock(key="resource:{resource}", ttl_s=LOCK_TTL),
    timeout_s=30,
)
async def stall(
    payload: Stall, ctx: JobContext, limits: FromDishka[LimitsBackend]
) -> dict[str, int]:
    if ctx.attempt == payload.stall_on_attempt and payload.stall_s:
        time.sleep(payload.stall_s)
    assert ctx.fence is not None
    fence = ctx.fence

    async def write_and_report() -> bool:
        accepted = await limits.fenced_write(payload.resource, fence, payload.name)
        await _hit(payload.url, name=payload.name, fence=fence, accepted=int(accepted))
        return accepted

    # The write and its report are one step: a lost lock stops the job after it.
    accepted = await asyncio.shield(write_and_report())
    if not accepted:
        raise TransientError(f"write with fence {ctx.fence} refused: a newer holder wrote")
    return {"fence": ctx.fence}


class Effect(BaseModel):
    url: str
    sleep_ms: int = 0


@job("test.effect", payload=Effect, timeout_s=30)
async def effect(payload: Effect, ctx: JobContext) -> dict[str, int]:
    """Work for a while, then make one call that carries the job id as its idempotency
    key (what a payment or an email API would get): the fault tests count effects by key."""
    await asyncio.sleep(payload.sleep_ms / 1000)
    response = await _client.get(
        payload.url,
        params={"attempt": ctx.attempt},
        headers={"Idempotency-Key": str(ctx.job_id)},
    )
    response.raise_for_status()
    return {"attempt": ctx.attempt}


class LockedEffect(BaseModel):
    url: str
    resource: str
    sleep_ms: int = 0


# A lock that outlives the job's lease (as sync.account's 30 s lock outlives the 6 s
# lease): a dead worker's job must still be taken over within about a lease.
@job(
    "test.locked_effect",
    payload=LockedEffect,
    timeout_s=30,
    lock=Lock(key="effect:{tenant_id}:{resource}", ttl_s=30),
)
async def locked_effect(payload: LockedEffect, ctx: JobContext) -> dict[str, int]:
    """test.effect under a lock of its own resource."""
    await asyncio.sleep(payload.sleep_ms / 1000)
    response = await _client.get(
        payload.url,
        params={"attempt": ctx.attempt, "fence": ctx.fence},
        headers={"Idempotency-Key": str(ctx.job_id)},
    )
    response.raise_for_status()
    return {"attempt": ctx.attempt}


class GatedEffect(BaseModel):
    url: str
    gate: str | None = None
    sleep_ms: int = 0


@job("test.gated_effect", payload=GatedEffect, timeout_s=60)
async def gated_effect(payload: GatedEffect, ctx: JobContext) -> dict[str, int]:
    """Say at once that this attempt started (its job, tenant and attempt, with no
    idempotency key), wait until the file `gate` exists (if one is named), work for
    `sleep_ms`, then make test.effect's one call under the job's id. An attempt at the
    gate stays running (renewing its lease) for as long as the test keeps the gate shut."""
    await _hit(payload.url, started=str(ctx.job_id), tenant=ctx.tenant_id, attempt=ctx.attempt)
    while payload.gate is not None and not Path(payload.gate).exists():
        await asyncio.sleep(0.05)
    await asyncio.sleep(payload.sleep_ms / 1000)
    response = await _client.get(
        payload.url,
        params={"attempt": ctx.attempt},
        headers={"Idempotency-Key": str(ctx.job_id)},
    )
    response.raise_for_status()
    return {"attempt": ctx.attempt}


module = Module(
    name="tests",
    jobs=[vendor_call, exclusive, stall, effect, locked_effect, gated_effect, cancellable],
)
