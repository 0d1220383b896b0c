"""A held job knows its place (fair dispatch, embedded mode): on GET /jobs/{id} and in
its event stream's `waiting` frames, its place in its tenant's line, which only ever
goes down while the line drains, why it waits, and an estimate of when it starts.

Counted, never timed: the places are compared with the order of the enqueues, and the
places read while the line drains with one another. The queue's figures for the
estimate are written by the test (the dispatcher measures them)."""

import math
from collections.abc import AsyncIterator
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import distinct, func, insert, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine

from jobrail.events import api as events_api
from jobrail.runtime.app import create_app, runtime_of
from jobrail.store.tables import dispatch_queues, jobs
from tests.api.conftest import embedded_settings, migrated
from tests.support.apps import REFERENCE
from tests.support.fair_starts import module
from tests.support.feed import SSE, sse_frames
from tests.support.fixtures import ApiClient
from tests.support.servers import served

SLOTS = 2
A_JOBS, B_JOBS = 24, 6
QUEUE = "jobs.default"


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[ApiClient]:
    settings = embedded_settings(
        tmp_path,
        dispatch={"enabled": True, "ready_target": SLOTS},
        worker={"max_async_tasks": SLOTS},
    )
    app = create_app(await migrated(settings), modules=[*REFERENCE, module])
    client = ApiClient(transport=httpx.ASGITransport(app=app), base_url="http://api")
    client.app = app
    async with app.router.lifespan_context(app), client:
        yield client


async def _admin(api: ApiClient, method: str, path: str, **kwargs: Any) -> None:
    headers = await api.auth("ops", admin=True)
    answer = await api.request(method, path, headers=headers, **kwargs)
    assert answer.status_code in (200, 201), answer.text


async def _backlog(api: ApiClient, tmp_path: Path) -> tuple[list[str], list[str]]:
    """A's and B's jobs, enqueued while the queue is paused: all of them held, in line."""
    await _admin(api, "POST", "/admin/pauses", json={"scope": "queue", "value": QUEUE})
    step = {"path": str(tmp_path / "starts"), "work_s": 0.1}
    a = [await api.enqueue("test.fair_step", step, "a") for _ in range(A_JOBS)]
    b = [await api.enqueue("test.fair_step", step, "b") for _ in range(B_JOBS)]
    return a, b


async def _tenants_in(api: ApiClient) -> int:
    """How many tenants have had jobs in the queue."""
    engine = await runtime_of(api.app).container.get(AsyncEngine)
    async with engine.connect() as conn:
        counted = select(func.count(distinct(jobs.c.tenant_id))).where(jobs.c.queue == QUEUE)
        return int((await conn.execute(counted)).scalar_one())


async def _figures(api: ApiClient, drain_per_s: float, active_weight: float) -> None:
    """The queue's figures, as the dispatcher writes them once a second."""
    engine = await runtime_of(api.app).container.get(AsyncEngine)
    figures = {"drain_per_s": drain_per_s, "active_weight": active_weight}
    async with engine.begin() as conn:
        written = await conn.execute(
            update(dispatch_queues).where(dispatch_queues.c.queue == QUEUE).values(**figures)
        )
    if written.rowcount == 0:  # the dispatcher has not made the queue's row yet
        try:
            async with engine.begin() as conn:
                await conn.execute(insert(dispatch_queues).values(queue=QUEUE, **figures))
        except IntegrityError:  # it just has
            await _figures(api, drain_per_s, active_weight)


def _finite_eta(waiting: dict[str, Any]) -> bool:
    eta = waiting["eta"]
    return eta is not None and math.isfinite(datetime.fromisoformat(eta).timestamp())


async def test_each_held_job_has_its_place_and_the_places_only_go_down_as_the_line_drains(
    api: ApiClient, tmp_path: Path
) -> None:
    as_a, as_b = await api.auth("a"), await api.auth("b")
    a, b = await _backlog(api, tmp_path)

    paused_a = [(await api.job(job, as_a))["waiting"] for job in a]
    paused_b = [(await api.job(job, as_b))["waiting"] for job in b]
    await _figures(api, drain_per_s=20.0, active_weight=2.0)
    last = (await api.job(a[-1], as_a))["waiting"]
    await _admin(api, "DELETE", f"/admin/pauses/queue/{QUEUE}")
    seen: list[dict[str, Any]] = []
    while True:  # read as fast as it answers while A's line drains ahead of its last
        job = await api.job(a[-1], as_a)
        if job["waiting"] is None or job["waiting"]["position"] is None:
            break
        seen.append(job["waiting"])
    done = await api.wait_status(a[-1], "succeeded", timeout=60, headers=as_a)

    assert [w["position"] for w in paused_a] == list(range(1, A_JOBS + 1))
    assert [w["ahead_in_tenant"] for w in paused_b] == list(range(B_JOBS))
    assert {w["reason"] for w in paused_a + paused_b} == {"paused"}
    assert {w["eta"] for w in paused_a} == {None}, "nothing starts before the resume"
    assert last["reason"] == "paused"
    assert last["eta"] is None
    positions = [w["position"] for w in seen]
    print(f"\nplaces of A's last job read while A's line drained: {positions}")
    assert positions == sorted(positions, reverse=True), "a place went up"
    assert len(set(positions)) >= 3, "the place was not seen moving"
    assert positions[0] <= A_JOBS
    assert {w["reason"] for w in seen} == {"fair_share"}
    assert all(w["ahead_in_tenant"] == w["position"] - 1 for w in seen)
    # Every tenant with jobs in the queue has weight 1: up to one job of each starts for
    # each of A's ahead of it. That is A and B, and whatever the runtime's own schedules
    # put in the queue meanwhile (held too, while it was paused).
    tenants = await _tenants_in(api)
    with_figures = [w for w in seen if w["ahead_in_queue"] is not None]
    assert with_figures, "no estimate while the line drained"
    assert all(_finite_eta(w) for w in with_figures)
    assert all(
        w["ahead_in_tenant"] <= w["ahead_in_queue"] <= tenants * w["ahead_in_tenant"]
        for w in with_figures
    ), (tenants, with_figures)
    assert done["waiting"] is None


async def test_a_job_s_stream_says_where_it_stands_as_it_moves(
    api: ApiClient, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(events_api, "PLACE_EVERY_S", 0.05)
    as_a = await api.auth("a")
    a, _ = await _backlog(api, tmp_path)
    frames: list[dict[str, Any]] = []
    events: list[str] = []
    async with (
        served(api.app) as url,
        httpx.AsyncClient(base_url=url, headers={**as_a, **SSE}) as http,
        http.stream("GET", f"/jobs/{a[-1]}/events", timeout=60) as stream,
    ):
        assert stream.status_code == 200
        async for name, data in sse_frames(stream):  # ends once the job has
            if name == "waiting":
                frames.append(data)
                if len(frames) == 1:  # it is in line: let the line drain
                    await _admin(api, "DELETE", f"/admin/pauses/queue/{QUEUE}")
            else:
                events.append(data["event"])

    waiting = [f["waiting"] for f in frames if f["waiting"] is not None]
    positions = [w["position"] for w in waiting if w["position"] is not None]
    print(f"\nplaces in the stream's waiting frames: {positions}")
    assert frames[0]["status"] == "pending"
    assert frames[0]["waiting"]["reason"] == "paused"
    assert frames[0]["waiting"]["position"] == A_JOBS
    assert frames[0]["paused"]["value"] == QUEUE
    assert positions == sorted(positions, reverse=True), "a place went up"
    assert len(set(positions)) >= 3, "the place was not seen moving"
    assert "fair_share" in {w["reason"] for w in waiting}
    # Once it is released to the workers (or runs), one frame says it no longer waits,
    # without an id (no event of the feed); then only its events follow.
    assert [f["waiting"] is None for f in frames].count(True) == 1
    assert frames[-1]["waiting"] is None
    assert frames[-1]["status"] in ("pending", "running")
    assert {f["_sse_id"] for f in frames} == {None}
    assert events[-2:] == ["started", "succeeded"]
