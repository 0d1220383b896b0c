"""Fair dispatch in the embedded mode: a tenant that arrives behind another's backlog
starts its jobs at once, sharing the workers, instead of after the whole backlog.

Counted by the order of starts (``tests/support/fair_starts.py``), never by time: with
four slots and at most four released jobs waiting for one, each of B's jobs has at
most a few of A's ahead of it once B has arrived. First in, first out, B's ten would
start after every one of A's."""

from collections import Counter
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

from fastapi import FastAPI
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from jobrail.jobs.enqueue import EnqueueJob, EnqueueJobCommand
from jobrail.jobs.priority import Priority
from jobrail.kernel.ids import TenantId
from jobrail.runtime.app import create_app, runtime_of
from jobrail.store.tables import jobs
from tests.api.conftest import embedded_settings, migrated
from tests.support.apps import REFERENCE
from tests.support.fair_starts import module, started
from tests.support.fixtures import ApiClient
from tests.support.services import wait_for

BACKLOG = 80
LATE = 10
SLOTS = 4


async def _enqueue(
    app: object,
    tenant: str,
    path: str,
    count: int,
    work_s: float,
    priority: Priority | None = None,
    user: str | None = None,
) -> list[str]:
    payload: dict[str, object] = {"path": path, "work_s": work_s}
    if user is not None:  # its own line inside the tenant's share
        payload["user"] = user
    async with runtime_of(app).container() as request:
        enqueue = await request.get(EnqueueJob)
        results = [
            await enqueue(
                EnqueueJobCommand(
                    tenant_id=TenantId(tenant),
                    type="test.fair_step" if user is None else "test.fair_user_step",
                    payload=payload,
                    priority=priority,
                )
            )
            for _ in range(count)
        ]
    return [str(result.job.id) for result in results]


async def _dispatching_app(tmp_path: Path) -> FastAPI:
    """The embedded app with fair dispatch, SLOTS slots and as many released at most."""
    settings = embedded_settings(
        tmp_path,
        dispatch={"enabled": True, "ready_target": SLOTS},
        worker={"max_async_tasks": SLOTS},
    )
    return create_app(await migrated(settings), modules=[*REFERENCE, module])


def _count(path: str, count: int) -> Callable[[], Awaitable[bool]]:
    async def reached() -> bool:
        return len(started(path)) >= count

    return reached


def _finished(engine: AsyncEngine) -> Callable[[], Awaitable[bool]]:
    async def ended() -> bool:
        async with engine.connect() as conn:
            active = await conn.scalar(
                select(func.count()).where(jobs.c.status.in_(["pending", "running"]))
            )
        return active == 0

    return ended


async def test_a_late_tenant_starts_its_jobs_among_the_backlog_not_after_it(
    tmp_path: Path,
) -> None:
    app = await _dispatching_app(tmp_path)
    path = str(tmp_path / "starts")
    async with app.router.lifespan_context(app):
        engine = await runtime_of(app).container.get(AsyncEngine)
        a_ids = await _enqueue(app, "a", path, BACKLOG, work_s=0.2)
        await wait_for(_count(path, SLOTS), timeout=30, what="A to start")
        b_ids = await _enqueue(app, "b", path, LATE, work_s=0.0)
        a_before = len(started(path))  # B has arrived: its jobs are committed

        async def all_of_b() -> bool:
            return sum(tenant == "b" for tenant, _ in started(path)) == LATE

        await wait_for(all_of_b, timeout=60, what="B's jobs to start")
        order = started(path)
        last_b = max(n for n, (tenant, _) in enumerate(order) if tenant == "b")
        a_meanwhile = sum(tenant == "a" for tenant, _ in order[a_before:last_b])

        await wait_for(_count(path, BACKLOG + LATE), timeout=60, what="every job to start")
        await wait_for(_finished(engine), timeout=30, what="every job to end")
        async with engine.connect() as conn:
            succeeded = await conn.scalar(
                select(func.count()).where(
                    jobs.c.type == "test.fair_step", jobs.c.status == "succeeded"
                )
            )
            held = await conn.scalar(select(func.count()).where(jobs.c.held_since.is_not(None)))

    print(f"\nA's starts between B's arrival and B's last start: {a_meanwhile} of {BACKLOG}")
    # Ahead of B's first: what was released before it arrived (SLOTS at most); then
    # the two take turns.
    assert a_meanwhile <= LATE + 2 * SLOTS, order
    ids = [job_id for _, job_id in started(path)]
    assert sorted(ids) == sorted(a_ids + b_ids), "a job started twice, or never"
    assert succeeded == BACKLOG + LATE
    assert held == 0


WEIGHTS = {"a": 3, "b": 2, "c": 1}
WINDOW = 60  # starts: 30, 20 and 10 by weight
ROUNDS = 40


async def test_backlogged_tenants_share_the_workers_by_their_weights(tmp_path: Path) -> None:
    import httpx

    app = await _dispatching_app(tmp_path)
    path = str(tmp_path / "starts")
    client = ApiClient(transport=httpx.ASGITransport(app=app), base_url="http://api")
    client.app = app
    async with app.router.lifespan_context(app), client:
        admin = await client.auth("ops", admin=True)
        for tenant, weight in WEIGHTS.items():
            await client.key_for(tenant)  # the tenant exists
            answer = await client.put(
                f"/admin/tenants/{tenant}/weight", json={"weight": weight}, headers=admin
            )
            assert answer.status_code == 200, answer.text
        # The whole backlog in while the queue is paused, then resumed: the three are
        # backlogged together from the first release (and their lines, in proportion to
        # their weights, run dry together).
        paused = await client.post(
            "/admin/pauses", json={"scope": "queue", "value": "jobs.default"}, headers=admin
        )
        assert paused.status_code == 201, paused.text
        for tenant, weight in WEIGHTS.items():
            await _enqueue(app, tenant, path, ROUNDS * weight, work_s=0.01)
        total = ROUNDS * sum(WEIGHTS.values())
        resumed = await client.delete("/admin/pauses/queue/jobs.default", headers=admin)
        assert resumed.status_code == 200, resumed.text
        await wait_for(_count(path, total), timeout=120, what="every job to start")

    order = [tenant for tenant, _ in started(path)]
    windows = [order[start : start + WINDOW] for start in range(0, total, WINDOW)]
    for window in windows:
        counts = Counter(window)
        print(f"\nstarts in a window of {WINDOW}: {dict(sorted(counts.items()))}")
        for tenant, weight in WEIGHTS.items():
            expected = WINDOW * weight / sum(WEIGHTS.values())
            assert abs(counts[tenant] - expected) <= 0.1 * expected + 1, (counts, order)
    assert len(order) == total


async def test_a_high_job_goes_ahead_of_its_tenant_s_backlog_and_a_low_one_behind(
    tmp_path: Path,
) -> None:
    app = await _dispatching_app(tmp_path)
    path = str(tmp_path / "starts")
    async with app.router.lifespan_context(app):
        backlog = await _enqueue(app, "a", path, 60, work_s=0.1)
        [low] = await _enqueue(app, "a", path, 1, work_s=0.0, priority=Priority.LOW)
        [high] = await _enqueue(app, "a", path, 1, work_s=0.0, priority=Priority.HIGH)
        before_high = len(started(path))
        await wait_for(_count(path, 62), timeout=60, what="every job to start")

    ids = [job_id for _, job_id in started(path)]
    # Ahead of the high one: what had started or been released before it came (at most
    # two passes' worth); the rest of the backlog waits behind it.
    assert ids.index(high) <= before_high + 2 * SLOTS, ids
    # The low one came after the backlog: within normal's head start (30 s) of it, so it
    # waits behind all of it (give or take the few a slot freed at once lets by: the
    # embedded mode's slots are not strictly first come, first served).
    assert ids.index(low) >= len(ids) - 1 - SLOTS, ids
    assert set(ids) == {*backlog, high, low}


async def test_a_late_user_starts_among_its_own_tenant_s_backlog(tmp_path: Path) -> None:
    """The second level: one tenant, a job type keyed by user; user y arrives behind
    user x's backlog and its jobs start among x's, as a late tenant's would."""
    app = await _dispatching_app(tmp_path)
    path = str(tmp_path / "starts")
    async with app.router.lifespan_context(app):
        engine = await runtime_of(app).container.get(AsyncEngine)
        await _enqueue(app, "a", path, BACKLOG, work_s=0.2, user="x")
        await wait_for(_count(path, SLOTS), timeout=30, what="x to start")
        await _enqueue(app, "a", path, LATE, work_s=0.0, user="y")
        x_before = len(started(path))

        async def all_of_y() -> bool:
            return sum(user == "y" for user, _ in started(path)) == LATE

        await wait_for(all_of_y, timeout=60, what="y's jobs to start")
        order = started(path)
        last_y = max(n for n, (user, _) in enumerate(order) if user == "y")
        x_meanwhile = sum(user == "x" for user, _ in order[x_before:last_y])
        await wait_for(_count(path, BACKLOG + LATE), timeout=60, what="every job to start")
        await wait_for(_finished(engine), timeout=30, what="every job to end")

    # First in, first out within the tenant, y's ten would start after x's eighty.
    assert x_meanwhile <= LATE + 2 * SLOTS, order
    assert Counter(user for user, _ in started(path)) == {"x": BACKLOG, "y": LATE}


async def test_a_job_due_later_waits_held_and_starts_once_due(tmp_path: Path) -> None:
    app = await _dispatching_app(tmp_path)
    path = str(tmp_path / "starts")
    async with app.router.lifespan_context(app):
        engine = await runtime_of(app).container.get(AsyncEngine)
        async with runtime_of(app).container() as request:
            enqueue = await request.get(EnqueueJob)
            result = await enqueue(
                EnqueueJobCommand(
                    tenant_id=TenantId("a"),
                    type="test.fair_step",
                    payload={"path": path, "work_s": 0.0},
                    run_after=datetime.now(UTC) + timedelta(seconds=1),
                )
            )
        async with engine.connect() as conn:
            held = await conn.scalar(select(jobs.c.held_since).where(jobs.c.id == result.job.id))
        assert held is not None  # waiting in the database, with no message

        await wait_for(_count(path, 1), timeout=30, what="the job to start once due")
        await wait_for(_finished(engine), timeout=30, what="it to end")
        async with engine.connect() as conn:
            row = (await conn.execute(select(jobs).where(jobs.c.id == result.job.id))).one()
    assert row.status == "succeeded"
    assert result.job.run_after is not None
    assert row.started_at >= result.job.run_after  # not before it was due
