"""SIGKILL the dispatcher mid-release, again and again: nothing lost, nothing run twice.

Fair dispatch is on: three tenants' jobs wait held in Postgres, and two worker
processes compete for the queue's dispatch lease (``dispatch_queues``), releasing a few
jobs a pass. KILLS times, once the lease's holder (``host:pid:random``) has released a
few jobs in its term, the test asks for the next release to stall between its confirmed
publish and its commit (``tests/support/dispatch_stall.py``), SIGKILLs the holder's
process there, and starts another worker so that two compete again. The killed pass's
transaction rolls back: its jobs stay held though their messages are in the broker, a
worker that gets such a message while the job is held drops it (a line in its log), and
the next holder releases the jobs again.

Checked, by counts: right after each kill, the killed pass's jobs are held and none has
started; at the end every job has succeeded and none is held, the recorder got every
job's effect, a job ran (attempts) or called (effects) more than once only if a killed
worker was running it (its takeover, after the job's lease), and only the killed passes'
jobs ever had a message dropped as held.

The second test is the release the kills race with, made to happen every time: a
release's message reaches a worker before the release commits (the worker claims it
while the pass's transaction is still open), and the job must still run.
"""

import asyncio
import os
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from jobrail.store.tables import dispatch_queues, jobs
from tests.faults.conftest import job_counts, wait_all_terminal
from tests.support import dispatch_stall
from tests.support.fixtures import ApiClient
from tests.support.processes import Process
from tests.support.rabbit import RabbitProbe
from tests.support.recorder import Recorder
from tests.support.services import wait_for

TENANTS, PER_TENANT, KILLS = ("a", "b", "c"), 200, 8
JOBS = len(TENANTS) * PER_TENANT
QUEUE = "jobs.default"
SLOTS = 4
# A holder is stalled and killed once its term has released this many jobs.
RELEASED_BEFORE_KILL = 2 * SLOTS
WORKER = {
    "JOBRAIL_WORKER__MAX_ASYNC_TASKS": str(SLOTS),
    "JOBRAIL_RABBIT__PREFETCH": str(SLOTS),
}
# A job's work: long enough that the backlog outlasts the kills (each releases a few
# dozen jobs), short enough that the rest drains in seconds.
WORK_MS = 200
# What a worker logs when a message finds its job held (a release that did not commit).
DROPPED = "waits for the dispatcher; message"


@pytest.fixture
def fault_env(fault_env: dict[str, str], tmp_path: Path) -> dict[str, str]:
    """The fault suite's settings, with fair dispatch on in the API (which holds the
    jobs) and the workers (which release them, SLOTS at most a pass), whose dispatcher
    stalls a release when the test asks."""
    return {
        **fault_env,
        "JOBRAIL_APP": "tests.support.dispatch_stall:rail",
        dispatch_stall.DIR_ENV: str(tmp_path),
        "JOBRAIL_DISPATCH__ENABLED": "true",
        "JOBRAIL_DISPATCH__READY_TARGET": str(SLOTS),
    }


@dataclass(frozen=True)
class Lease:
    holder: str
    term: int

    @property
    def pid(self) -> int:
        return int(self.holder.rsplit(":", 2)[1])


@dataclass
class Kill:
    lease: Lease
    released_in_term: int
    published: list[str]  # the jobs whose messages the killed pass had sent
    running_then: set[str]
    still_held: bool | None  # None: another holder took over before the test looked


async def _lease(engine: AsyncEngine) -> Lease | None:
    async with engine.connect() as conn:
        row = (
            await conn.execute(
                select(dispatch_queues.c.holder, dispatch_queues.c.term).where(
                    dispatch_queues.c.queue == QUEUE
                )
            )
        ).first()
    return None if row is None or row.holder is None else Lease(row.holder, row.term)


async def _held(engine: AsyncEngine) -> int:
    async with engine.connect() as conn:
        count = await conn.scalar(
            select(func.count()).select_from(jobs).where(jobs.c.held_since.is_not(None))
        )
    return int(count or 0)


async def _running(engine: AsyncEngine) -> set[str]:
    async with engine.connect() as conn:
        ids = (await conn.execute(select(jobs.c.id).where(jobs.c.status == "running"))).scalars()
        return {str(job_id) for job_id in ids}


def _owner(lease: Lease, pool: list[Process]) -> int:
    """The index in `pool` of the live worker whose process group the holder's process
    is in (taskiq runs the jobs, and so the dispatcher, in a child of the worker's)."""
    try:
        group = os.getpgid(lease.pid)
    except ProcessLookupError:
        group = None
    for n, process in enumerate(pool):
        if process.alive() and process.pid == group:
            return n
    raise AssertionError(f"the lease's holder {lease.holder} is none of the live workers")


def _releasing(
    engine: AsyncEngine, after: int, first_held: dict[int, int]
) -> Callable[[], Awaitable[tuple[Lease, int] | None]]:
    """The lease, once its term (after `after`) has released RELEASED_BEFORE_KILL jobs,
    counted from the held jobs when the test first saw the term; and how many."""

    async def found() -> tuple[Lease, int] | None:
        lease = await _lease(engine)
        if lease is None or lease.term <= after:
            return None
        held = await _held(engine)
        released = first_held.setdefault(lease.term, held) - held
        return (lease, released) if released >= RELEASED_BEFORE_KILL else None

    return found


def _stalls(directory: Path, count: int) -> Callable[[], Awaitable[bool]]:
    async def reached() -> bool:
        return len(dispatch_stall.stalled(directory)) >= count

    return reached


async def _untouched(engine: AsyncEngine, term: int, ids: list[str]) -> bool | None:
    """Whether the jobs of `ids` are all still held and never started, read in one
    snapshot with the lease's term; None if the term is no longer `term` (another
    holder may have released them since, rightly)."""
    async with engine.connect() as conn:
        conn = await conn.execution_options(isolation_level="REPEATABLE READ")
        async with conn.begin():
            now_term = await conn.scalar(
                select(dispatch_queues.c.term).where(dispatch_queues.c.queue == QUEUE)
            )
            rows = (
                await conn.execute(
                    select(jobs.c.held_since, jobs.c.status, jobs.c.attempts).where(
                        jobs.c.id.in_(ids)
                    )
                )
            ).all()
    if now_term != term:
        return None
    return len(rows) == len(ids) and all(
        row.held_since is not None and row.status == "pending" and row.attempts == 0 for row in rows
    )


def _dropped(processes: Iterable[Process]) -> Counter[str]:
    """Job ids whose message a worker dropped because the job was held, and how often."""
    dropped: Counter[str] = Counter()
    for process in processes:
        for record in process.log_records():
            if DROPPED in str(record.get("msg", "")):
                dropped[str(record["job_id"])] += 1
    return dropped


async def _all_succeeded(
    engine: AsyncEngine,
    expected: int,
    processes: list[Process],
    stalled: set[str],
    timeout: float,
) -> float:
    """wait_all_terminal; if it times out, what became of the unfinished jobs: held or
    not, whether a stalled pass had published them, and what the workers said of them."""
    try:
        return await wait_all_terminal(engine, expected, timeout=timeout)
    except AssertionError as failure:
        async with engine.connect() as conn:
            rows = (
                await conn.execute(
                    select(jobs.c.id, jobs.c.status, jobs.c.attempts, jobs.c.held_since).where(
                        jobs.c.status != "succeeded"
                    )
                )
            ).all()
        story = [
            f"{row.id} {row.status} attempts={row.attempts} "
            f"held={row.held_since is not None} published_by_a_stalled_pass="
            f"{str(row.id) in stalled}"
            for row in rows[:10]
        ]
        said = [
            f"{process.name}: {line}"
            for process in processes
            for line in process.output().splitlines()
            if any(str(row.id) in line for row in rows[:10])
        ]
        raise AssertionError("\n".join([str(failure), *story, *said])) from None


async def test_the_dispatcher_killed_mid_release_loses_nothing_and_runs_nothing_twice(
    api: ApiClient,
    workers: Any,
    spawn_worker: Any,
    recorder: Recorder,
    engine: AsyncEngine,
    tmp_path: Path,
    report: Any,
) -> None:
    payload = {"url": recorder.url, "sleep_ms": WORK_MS}
    job_ids = set(
        await asyncio.gather(
            *(
                api.enqueue("test.effect", payload, tenant)
                for tenant in TENANTS
                for _ in range(PER_TENANT)
            )
        )
    )
    assert await _held(engine) == JOBS
    pool: list[Process] = [await workers(f"w{n}", **WORKER) for n in range(2)]
    everyone = list(pool)

    kills: list[Kill] = []
    first_held: dict[int, int] = {}
    term = 0
    for kill in range(KILLS):
        lease, released = await wait_for(
            _releasing(engine, term, first_held),
            timeout=120,
            interval=0.02,
            what=f"a holder of a term after {term} to release {RELEASED_BEFORE_KILL} jobs",
        )
        victim = _owner(lease, pool)
        dispatch_stall.request(tmp_path)
        await wait_for(
            _stalls(tmp_path, kill + 1), timeout=120, interval=0.01, what=f"release {kill} to stall"
        )
        pid, sent = dispatch_stall.stalled(tmp_path)[-1]
        assert (pid, await _lease(engine)) == (lease.pid, lease), "another process released"
        pool[victim].kill()
        still_held = await _untouched(engine, lease.term, sent)
        kills.append(Kill(lease, released, sent, await _running(engine), still_held))
        pool[victim] = spawn_worker(f"w{victim}-after-kill-{kill}", **WORKER)
        everyone.append(pool[victim])
        term = lease.term
    last_kill = time.monotonic()

    published = {job_id for k in kills for job_id in k.published}
    done_at = await _all_succeeded(engine, JOBS, everyone, published, timeout=180)
    counts = await job_counts(engine)
    async with engine.connect() as conn:
        rows = await conn.execute(select(jobs.c.id, jobs.c.attempts))
        attempts = {str(job_id): n for job_id, n in rows}
    effects = recorder.effects()
    dropped = _dropped(everyone)
    taken_over = {job_id for k in kills for job_id in k.running_then}
    ran_twice = {job_id for job_id, n in attempts.items() if n > 1}
    called_twice = {job_id for job_id, n in effects.items() if n > 1}
    summary = (
        f"{len(kills)} holders killed mid-release after "
        f"{[k.released_in_term for k in kills]} releases in their terms, "
        f"{len(published)} jobs published by the killed passes, "
        f"{len(dropped)} of them dropped as held ({sum(dropped.values())} messages), "
        f"{len(ran_twice)} jobs taken over after a kill"
    )
    print(f"\n{summary}")

    # Each kill landed between a pass's publish and its commit: the pass's jobs were
    # still held and none had started (unless another holder had already taken over).
    assert all(k.published for k in kills), kills
    assert all(k.still_held is not False for k in kills), kills
    # Nothing lost: every job succeeded, none is held, every effect was made.
    assert counts == {"succeeded": JOBS}, counts
    assert await _held(engine) == 0
    assert set(effects) == job_ids
    # Nothing twice: a job ran again, or made its effect again, only if a killed worker
    # was running it.
    assert ran_twice <= taken_over, ran_twice - taken_over
    assert called_twice <= taken_over, called_twice - taken_over
    # A message was dropped as held only for a job of a pass that did not commit.
    assert set(dropped) <= published, set(dropped) - published
    report(
        scenario=f"dispatcher sigkill x{KILLS} mid-release, {JOBS} jobs, 3 tenants",
        jobs=sum(counts.values()),
        succeeded=counts["succeeded"],
        lost=0,
        duplicated=0,
        redeliveries_absorbed=sum(effects.values()) - len(effects),
        recover_s=round(done_at - last_kill, 1),
        notes=summary,
    )


async def test_a_message_that_reaches_a_worker_before_its_release_commits_still_runs(
    api: ApiClient,
    workers: Any,
    rabbit: RabbitProbe,
    recorder: Recorder,
    engine: AsyncEngine,
    tmp_path: Path,
) -> None:
    """A pass's messages are confirmed before it commits, so a worker with room can get
    one while the job is still held in every snapshot but the pass's own: the claim must
    not take that for a release that did not commit (and drop the message), or the job,
    released at the commit, waits for ever with no message on its way."""
    payload = {"url": recorder.url}
    job_ids = {await api.enqueue("test.effect", payload, "a") for _ in range(SLOTS)}
    dispatch_stall.request(tmp_path)
    worker = await workers("w0", **WORKER)
    await wait_for(_stalls(tmp_path, 1), timeout=60, what="the release to stall")
    _, published = dispatch_stall.stalled(tmp_path)[0]
    queue = rabbit.topology.queues[QUEUE]

    async def delivered() -> bool:
        ready, _ = await rabbit.depth(queue)
        return ready == 0

    # The release's messages are with the worker, which claims them (its claim meets
    # the jobs as the open release left them); then the release commits.
    await wait_for(delivered, timeout=60, what="the released messages to reach the worker")
    dispatch_stall.resume(tmp_path)

    await _all_succeeded(engine, len(job_ids), [worker], set(published), timeout=60)
    assert set(recorder.effects()) == job_ids
    assert await _held(engine) == 0
