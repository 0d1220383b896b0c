"""A SIGKILLed worker's jobs are taken over within seconds, whatever the backlog.

1,000 jobs are queued before the workers start; three times, a worker is killed
while it runs jobs. RabbitMQ hands the dead worker's unacknowledged messages to the
survivors at once, at the head of the queue; the job rows are still claimed by the
dead attempt, so each survivor holds the message until that claim's lease ends and
then starts the job. The takeover gap of each job (the new attempt's `started_at`
in its row, minus the moment of the kill) is bounded by the lease, not by the time
the backlog takes to drain. Half the jobs hold a lock whose TTL (30 s) is far longer
than the lease: the survivor takes the dead attempt's lock over once it has claimed
the job, instead of waiting for the TTL.
"""

import asyncio
import statistics
import time
from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from jobrail.settings import JobsSettings
from jobrail.store.tables import jobs
from tests.faults.conftest import job_counts, wait_all_terminal
from tests.support.fixtures import ApiClient
from tests.support.processes import Process
from tests.support.recorder import Recorder
from tests.support.services import wait_for

JOBS, KILLS, WORKERS = 1000, 3, 3
WORKER = {
    "JOBRAIL_WORKER__MAX_ASYNC_TASKS": "4",
    "JOBRAIL_RABBIT__PREFETCH": "4",
    # test.effect's own timeout (30 s) is longer than the lease: its claims are the
    # short renewed ones every job with a real timeout gets (the lease is the default).
    "JOBRAIL_JOBS__TIMEOUTS_S": '{"test.effect": 30, "test.locked_effect": 30}',
}
LEASE_S = JobsSettings().lease_s
# After the lease ends the holder claims at once; the rest is the machine's slowness.
BOUND_S = LEASE_S + 6


@dataclass
class Takeover:
    job_id: str
    gap_s: float
    unfinished_then: int = 0
    job_type: str = ""


async def _running(engine: AsyncEngine) -> dict[Any, int]:
    async with engine.connect() as conn:
        rows = (
            await conn.execute(select(jobs.c.id, jobs.c.attempts).where(jobs.c.status == "running"))
        ).all()
    return {row.id: row.attempts for row in rows}


async def _resolve(
    engine: AsyncEngine, snapshot: dict[Any, int], killed_at: float
) -> list[Takeover]:
    """Follow the jobs running at the kill until each has either started again (the
    dead worker's: a new attempt) or finished its attempt (a survivor's)."""
    taken: dict[Any, Takeover] = {}
    settled: set[Any] = set()

    async def all_settled() -> bool:
        async with engine.connect() as conn:
            rows = (
                await conn.execute(
                    select(
                        jobs.c.id, jobs.c.type, jobs.c.status, jobs.c.attempts, jobs.c.started_at
                    ).where(jobs.c.id.in_(list(snapshot)))
                )
            ).all()
        for row in rows:
            if row.id in settled:
                continue
            if row.attempts > snapshot[row.id]:
                assert row.started_at is not None
                gap = row.started_at.timestamp() - killed_at
                taken[row.id] = Takeover(str(row.id), gap, job_type=row.type)
                settled.add(row.id)
            elif row.status in ("succeeded", "failed", "cancelled"):
                settled.add(row.id)
        return len(settled) == len(snapshot)

    await wait_for(all_settled, timeout=180, interval=0.2, what="the killed jobs to restart")
    return list(taken.values())


async def test_a_killed_workers_jobs_are_taken_over_within_seconds_despite_a_backlog(
    api: ApiClient,
    workers: Any,
    spawn_worker: Any,
    recorder: Recorder,
    engine: AsyncEngine,
    report: Any,
) -> None:
    # Every eighth job runs long enough to renew its claim, and every other one holds a
    # lock of its own. (The backlog takes about two minutes to drain: far longer than
    # the three kills take.)
    def job(n: int) -> tuple[str, dict[str, Any]]:
        payload: dict[str, Any] = {"url": recorder.url, "sleep_ms": 3000 if n % 8 == 0 else 1000}
        if n % 2:
            return "test.locked_effect", {**payload, "resource": f"r{n}"}
        return "test.effect", payload

    job_ids = set(await asyncio.gather(*(api.enqueue(*job(n)) for n in range(JOBS))))
    started = time.monotonic()
    pool: list[Process] = [await workers(f"w{n}", **WORKER) for n in range(WORKERS)]

    takeovers: list[Takeover] = []
    for kill in range(KILLS):
        await asyncio.sleep(1)
        victim = kill % WORKERS
        pool[victim].kill()
        killed_at = time.time()
        snapshot = await _running(engine)
        pool[victim] = spawn_worker(f"w{victim}-after-kill-{kill}", **WORKER)
        taken = await _resolve(engine, snapshot, killed_at)
        gaps = sorted(round(t.gap_s, 1) for t in taken)
        print(f"\nkill {kill}: {len(snapshot)} jobs running, taken over after {gaps} s")
        assert taken, f"kill {kill} found the victim running nothing: {snapshot}"
        assert gaps[-1] <= BOUND_S, f"kill {kill}: takeover gaps {gaps} s, bound {BOUND_S} s"
        takeovers += taken

    # How much of the backlog was still to do when each job was taken over.
    async with engine.connect() as conn:
        for takeover in takeovers:
            started_again = (
                await conn.execute(select(jobs.c.started_at).where(jobs.c.id == takeover.job_id))
            ).scalar_one()
            takeover.unfinished_then = (
                await conn.scalar(
                    select(func.count())
                    .select_from(jobs)
                    .where((jobs.c.finished_at.is_(None)) | (jobs.c.finished_at > started_again))
                )
            ) or 0

    done_at = await wait_all_terminal(engine, JOBS, timeout=600)
    drain_s = done_at - started

    counts = await job_counts(engine)
    effects = recorder.effects()
    gaps = sorted(t.gap_s for t in takeovers)
    summary = (
        f"takeover gaps min/median/max = {gaps[0]:.1f}/{statistics.median(gaps):.1f}/"
        f"{gaps[-1]:.1f}s over {len(gaps)} jobs (lease {LEASE_S:g}s), "
        f"backlog drained in {drain_s:.0f}s"
    )
    print(f"\n{summary}; unfinished at each takeover: {[t.unfinished_then for t in takeovers]}")

    assert counts == {"succeeded": JOBS}, counts
    # Every job's effect was asked for; a repeat (a kill after the call) only ever
    # under the job's own key, which the receiver dedupes.
    assert set(effects) == job_ids
    # Taken over within seconds of the kill, while most of the backlog was still waiting,
    # locked jobs too (their lock's TTL is 30 s).
    assert gaps[-1] <= BOUND_S, summary
    assert any(t.job_type == "test.locked_effect" for t in takeovers), takeovers
    assert min(t.unfinished_then for t in takeovers) >= 200, takeovers
    assert drain_s > 2 * BOUND_S, summary
    report(
        scenario=f"sigkill x{KILLS} under a {JOBS}-job backlog",
        jobs=sum(counts.values()),
        succeeded=counts["succeeded"],
        lost=0,
        duplicated=0,
        redeliveries_absorbed=sum(effects.values()) - len(effects),
        recover_s=round(gaps[-1], 1),
        notes=summary,
    )
