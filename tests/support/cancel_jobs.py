"""A job type that runs until it is cancelled, in one of four ways, and the markers
it leaves (files next to the test) to say how far it got."""

import asyncio
import hashlib
from pathlib import Path
from typing import Literal

import httpx
from pydantic import BaseModel

from jobrail import JobContext, Lock, job

Way = Literal["spin", "sleep", "http", "shielded", "quick"]


class Cancellable(BaseModel):
    way: Way
    marks: str
    """The directory its markers go to, named `<job id>.<mark>`."""
    resource: str = "r"
    url: str = ""
    """For `http`: a loopback server that never answers."""


def mark(payload: Cancellable, ctx: JobContext, name: str) -> None:
    (Path(payload.marks) / f"{ctx.job_id}.{name}").touch()


def marked(marks: Path, job_id: str, name: str) -> bool:
    return (marks / f"{job_id}.{name}").exists()


async def _spin() -> None:
    """Work that never checkpoints: CPU between bare yields to the event loop."""
    digest = b""
    while True:
        for _ in range(20):
            digest = hashlib.sha256(digest).digest()
        await asyncio.sleep(0)


async def _shielded(payload: Cancellable, ctx: JobContext) -> None:
    task = asyncio.current_task()
    assert task is not None

    async def section() -> None:
        mark(payload, ctx, "section")
        while not task.cancelling():  # the stop has come: finish the section anyway
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.5)
        mark(payload, ctx, "section-done")

    await ctx.shielded(section())
    mark(payload, ctx, "after-section")  # never: the stop takes effect on return


@job(
    "test.cancellable",
    payload=Cancellable,
    timeout_s=120,
    lock=Lock(key="cancellable:{tenant_id}:{resource}", ttl_s=60),
)
async def cancellable(payload: Cancellable, ctx: JobContext) -> dict[str, str]:
    mark(payload, ctx, "started")
    try:
        match payload.way:
            case "spin":
                await _spin()
            case "sleep":
                await asyncio.sleep(3600)
            case "http":
                async with httpx.AsyncClient(timeout=None) as client:
                    await client.get(payload.url)
            case "shielded":
                await _shielded(payload, ctx)
            case "quick":
                pass
        return {"way": payload.way}
    finally:
        mark(payload, ctx, "cleanup")
