"""A tenant paused while its jobs run, and their worker SIGKILLed: nothing of the tenant
starts until the resume, the other tenant's jobs go on, and after the resume every job
ends, each effect made once, the killed attempts taken over once.

Tenants P and Q enqueue `test.gated_effect` jobs (interleaved, before the worker
starts). Each attempt tells the recorder it started (job, tenant, attempt); P's jobs
then wait at a gate (a file) the test keeps shut, so they are running, and stay so, when
P is paused; Q's work a moment and make their effect. The worker is SIGKILLed once
P is paused with some of P's jobs running, and a new one started. Paused, P's killed
jobs are not taken over when their lease ends (the new worker's claim is refused, a line
of its log) and none of P's waiting jobs starts, while every Q job runs to
its end; then the gate opens and P is resumed. Run with fair dispatch off and on.

Checked by counts, never by time: P's starts while paused are only the attempts running
at the kill; every Q job succeeded while P was paused; at the end every job of both
succeeded, none is held, each effect was made, and a job started, ran or made its
effect more than once only if the kill caught it running (P's killed jobs exactly once
more: their takeover, after the resume).
"""

import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from jobrail.store.tables import jobs
from tests.faults.conftest import job_counts, wait_all_terminal
from tests.support.fixtures import ApiClient
from tests.support.processes import Process
from tests.support.recorder import Recorder
from tests.support.services import wait_for

P, Q = "p", "q"
P_JOBS, Q_JOBS = 6, 24
SLOTS = 4
WORKER = {
    "JOBRAIL_WORKER__MAX_ASYNC_TASKS": str(SLOTS),
    "JOBRAIL_RABBIT__PREFETCH": str(SLOTS),
}
# What a worker logs (at DEBUG) when a job's claim is refused and its message is sent
# round again: for a killed attempt's job, once its lease has ended.
REFUSED = " not claimable now; deferred"


@pytest.fixture(params=[False, True], ids=["plain", "fair"])
def fair(request: pytest.FixtureRequest) -> bool:
    return bool(request.param)


@pytest.fixture
def fault_env(fault_env: dict[str, str], fair: bool) -> dict[str, str]:
    """The fault suite's settings, with fair dispatch on or off in the API and the
    workers; off, the dispatchers still release what a pause held, every second."""
    return {
        **fault_env,
        "JOBRAIL_DISPATCH__ENABLED": str(fair).lower(),
        "JOBRAIL_DISPATCH__READY_TARGET": str(SLOTS),
        "JOBRAIL_DISPATCH__REDISCOVER_S": "1",
    }


def _starts(recorder: Recorder, tenant: str | None = None) -> list[tuple[str, int]]:
    """(job id, attempt) of each start the recorder got, of `tenant` or of all."""
    return [
        (call.params["started"], int(call.params["attempt"]))
        for call in list(recorder.calls)
        if "started" in call.params and tenant in (None, call.params["tenant"])
    ]


async def _running(engine: AsyncEngine) -> dict[str, tuple[str, int]]:
    """The running jobs: their tenant and attempt."""
    async with engine.connect() as conn:
        rows = await conn.execute(
            select(jobs.c.id, jobs.c.tenant_id, jobs.c.attempts).where(jobs.c.status == "running")
        )
        return {str(row.id): (row.tenant_id, row.attempts) for row in rows}


async def _attempts(engine: AsyncEngine) -> dict[str, int]:
    async with engine.connect() as conn:
        return {str(row.id): row.attempts for row in await conn.execute(select(jobs))}


async def _held(engine: AsyncEngine) -> int:
    async with engine.connect() as conn:
        count = await conn.scalar(
            select(func.count()).select_from(jobs).where(jobs.c.held_since.is_not(None))
        )
    return int(count or 0)


def _refused(process: Process, job_ids: set[str]) -> bool:
    """Whether `process` has tried to claim each of `job_ids` (once its attempt's lease
    had ended), and had the claim refused: a debug line of its log."""
    assert process.alive(), process.output()[-3000:]
    said = [str(record.get("msg", "")) for record in process.log_records()]
    return all(any(f"job {job_id}{REFUSED}" in line for line in said) for job_id in job_ids)


async def _succeeded(engine: AsyncEngine, ids: set[str]) -> bool:
    async with engine.connect() as conn:
        count = await conn.scalar(
            select(func.count()).where(jobs.c.id.in_(ids), jobs.c.status == "succeeded")
        )
    return count == len(ids)


async def test_a_paused_tenant_s_killed_jobs_wait_for_the_resume_while_the_other_goes_on(
    api: ApiClient,
    workers: Any,
    spawn_worker: Any,
    recorder: Recorder,
    engine: AsyncEngine,
    tmp_path: Path,
    fair: bool,
    report: Any,
) -> None:
    gate = tmp_path / "gate"
    ids: dict[str, set[str]] = {P: set(), Q: set()}
    # Interleaved, so that the worker's first jobs are of both, dispatch on or off.
    gated = {"url": recorder.url, "gate": str(gate)}
    working = {"url": recorder.url, "sleep_ms": 200}
    for n in range(max(P_JOBS, Q_JOBS)):
        if n < P_JOBS:
            ids[P].add(await api.enqueue("test.gated_effect", gated, P))
        ids[Q].add(await api.enqueue("test.gated_effect", working, Q))
    admin = await api.auth("ops", admin=True)
    first = await workers("w0", **WORKER)

    async def p_running() -> bool:
        return len(set(_starts(recorder, P))) >= 2

    await wait_for(p_running, timeout=60, interval=0.05, what="two of P's jobs to start")
    paused = await api.post("/admin/pauses", json={"scope": "tenant", "value": P}, headers=admin)
    assert paused.status_code == 201, paused.text
    first.kill()
    killed = await _running(engine)  # the dead worker's: every claim it holds
    second = spawn_worker("w1-after-kill", **WORKER, JOBRAIL_LOG_LEVEL="DEBUG")
    killed_p = {job_id: attempt for job_id, (tenant, attempt) in killed.items() if tenant == P}
    # P's jobs wait at the gate: those that started were running at the kill.
    assert len(killed_p) >= 2, killed

    # Paused: Q's jobs all run to their end, and the new worker tries to take each of
    # P's killed jobs over once its lease has ended, and is refused.
    # Any start of P's but the killed attempts' fails the test at once.
    async def q_done_and_p_refused() -> bool:
        unexpected = set(_starts(recorder, P)) - set(killed_p.items())
        assert not unexpected, f"P's jobs started while paused: {unexpected}; killed {killed_p}"
        return await _succeeded(engine, ids[Q]) and _refused(second, set(killed_p))

    await wait_for(
        q_done_and_p_refused,
        timeout=120,
        interval=0.1,
        what="every Q job to succeed and P's killed jobs' claims to be refused",
    )
    p_starts_paused = _starts(recorder, P)
    attempts_paused = await _attempts(engine)

    gate.touch()
    resumed = await api.delete(f"/admin/pauses/tenant/{P}", headers=admin)
    assert resumed.status_code == 200, resumed.text
    resumed_at = time.monotonic()
    done_at = await wait_all_terminal(engine, P_JOBS + Q_JOBS, timeout=120)

    counts = await job_counts(engine)
    attempts = await _attempts(engine)
    starts = Counter(job_id for job_id, _ in _starts(recorder))
    effects = recorder.effects()
    taken_over = set(killed)
    summary = (
        f"fair dispatch {'on' if fair else 'off'}: {len(killed)} jobs running at the kill "
        f"({len(killed_p)} of P), {len(p_starts_paused)} starts of P while paused, "
        f"{sum(n > 1 for n in attempts.values())} jobs taken over"
    )
    print(f"\n{summary}")

    # While paused: P's only starts were the attempts the kill caught (none taken over,
    # none of its waiting jobs started), and P's jobs kept their attempts.
    assert set(p_starts_paused) <= set(killed_p.items()), (p_starts_paused, killed_p)
    assert all(attempts_paused[job_id] == n for job_id, n in killed_p.items()), attempts_paused
    assert all(attempts_paused[job_id] == 0 for job_id in ids[P] - set(killed_p))
    # After the resume: every job of both succeeded once, none held, every effect made.
    assert counts == {"succeeded": P_JOBS + Q_JOBS}, counts
    assert await _held(engine) == 0
    assert set(effects) == ids[P] | ids[Q]
    assert set(starts) == ids[P] | ids[Q]
    # More than once only if the kill caught it running; P's killed jobs exactly once
    # more (the takeover), and their effect once (the killed attempt waited at the gate).
    assert {job_id for job_id, n in attempts.items() if n > 1} <= taken_over
    assert {job_id for job_id, n in starts.items() if n > 1} <= taken_over
    assert {job_id for job_id, n in effects.items() if n > 1} <= taken_over - set(killed_p)
    assert {job_id: attempts[job_id] for job_id in killed_p} == {
        job_id: n + 1 for job_id, n in killed_p.items()
    }
    assert all(attempts[job_id] == 1 for job_id in ids[P] - set(killed_p)), attempts
    report(
        scenario=f"tenant paused, its worker sigkilled, fair dispatch {'on' if fair else 'off'}",
        jobs=sum(counts.values()),
        succeeded=counts["succeeded"],
        lost=0,
        duplicated=0,
        redeliveries_absorbed=sum(effects.values()) - len(effects),
        recover_s=round(done_at - resumed_at, 1),
        notes=summary,
    )
