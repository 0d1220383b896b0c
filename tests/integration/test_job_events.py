"""The job event feed's store, on SQLite and Postgres: every change of a job is an
event written by the database in the changing transaction, whatever wrote it; a reader
never sees an event appear behind a cursor it already read, even when an older
transaction commits after a younger one; retention deletes old events only."""

import asyncio
import dataclasses
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import insert, select, text, update
from sqlalchemy.ext.asyncio import AsyncEngine

from jobrail.events.feed import START, EventFilter
from jobrail.events.persistence import SqlaJobEventLog
from jobrail.kernel.ids import TenantId
from jobrail.store.tables import job_events, jobs
from tests.support.services import store_engine


@pytest.fixture(params=["sqlite", "postgres"])
async def engine(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[AsyncEngine]:
    engine: AsyncEngine = await store_engine(request, tmp_path, "jobs, job_events")
    yield engine
    await engine.dispose()


def _job(tenant: str, **values: Any) -> dict[str, Any]:
    now = datetime.now(UTC)
    return {
        "id": uuid.uuid4(),
        "tenant_id": tenant,
        "type": "demo.echo",
        "queue": "default",
        "status": "pending",
        "payload": {},
        "max_attempts": 3,
        "trace_context": {},
        "created_at": now,
        "updated_at": now,
        **values,
    }


async def test_every_change_a_client_follows_is_one_event(engine: AsyncEngine) -> None:
    tenant = f"t-{uuid.uuid4().hex[:8]}"
    row = _job(tenant)
    now = datetime.now(UTC)
    progress = {"current": 1, "total": 2, "message": "half", "updated_at": now.isoformat()}
    waiting = {
        "on": [{"kind": "lock", "name": "lock", "key": "k"}],
        "until": now.isoformat(),
        "since": now.isoformat(),
    }
    changes: list[dict[str, Any]] = [
        {"waiting": waiting},  # deferred
        {"status": "running", "attempts": 1, "waiting": None},  # started
        {"progress": progress},  # progress
        {"lease_until": now + timedelta(seconds=5)},  # a renewal: nothing
        {"status": "retrying", "last_error": "boom", "run_after": now},  # retrying
        {"status": "running", "attempts": 2},  # started again
        {"status": "failed", "finished_at": now},  # failed
        {"status": "pending", "attempts": 0},  # redriven
    ]
    async with engine.begin() as conn:
        await conn.execute(insert(jobs).values(row))
    for change in changes:
        async with engine.begin() as conn:
            await conn.execute(update(jobs).where(jobs.c.id == row["id"]).values(**change))

    events = await SqlaJobEventLog(engine).read(EventFilter(TenantId(tenant)), 100)

    assert [e.name for e in events] == [
        "enqueued",
        "deferred",
        "started",
        "progress",
        "retrying",
        "started",
        "failed",
        "redriven",
    ]
    assert events[1].waiting is not None
    assert events[1].waiting.on[0].key == "k"
    assert events[3].progress is not None
    assert events[3].progress.message == "half"
    assert events[4].last_error == "boom"
    assert events[4].run_after is not None
    assert [e.attempts for e in events] == [0, 0, 1, 1, 1, 2, 2, 0]
    assert all(e.job_id == row["id"] for e in events)
    assert events == sorted(events, key=lambda e: e.cursor)


def _progress(current: int, total: int) -> dict[str, Any]:
    now = datetime.now(UTC).isoformat()
    return {"current": current, "total": total, "message": f"row {current}", "updated_at": now}


async def test_a_jobs_story_folds_each_run_of_progress_into_its_newest(
    engine: AsyncEngine,
) -> None:
    tenant = f"t-{uuid.uuid4().hex[:8]}"
    row, other = _job(tenant), _job(tenant)
    now = datetime.now(UTC)
    changes: list[tuple[dict[str, Any], dict[str, Any]]] = [
        (row, {"status": "running", "attempts": 1}),
        *[(row, {"progress": _progress(n, 5)}) for n in range(2)],
        (other, {"progress": _progress(0, 1)}),  # another job's: no part of this story
        *[(row, {"progress": _progress(n, 5)}) for n in range(2, 5)],
        (row, {"status": "retrying", "last_error": "boom", "run_after": now}),
        (row, {"status": "running", "attempts": 2}),
        *[(row, {"progress": _progress(n, 3)}) for n in range(3)],
        (row, {"status": "succeeded", "finished_at": now}),
    ]
    async with engine.begin() as conn:
        await conn.execute(insert(jobs).values([row, other]))
    for job, change in changes:
        async with engine.begin() as conn:
            await conn.execute(update(jobs).where(jobs.c.id == job["id"]).values(**change))
    log = SqlaJobEventLog(engine)
    ours = EventFilter(TenantId(tenant), job_id=row["id"])
    events = await log.read(ours, 100)

    story = await log.story(ours, 100)

    assert [(line.event.name, line.folded) for line in story] == [
        ("enqueued", None),
        ("started", None),
        ("progress", 5),
        ("retrying", None),
        ("started", None),
        ("progress", 3),
        ("succeeded", None),
    ]
    # Each folded line is the newest event of its run, as the feed has it.
    assert story[2].event == events[6]
    assert story[5].event == events[11]
    assert [line.event for line in story if line.folded is None] == [
        e for e in events if e.name != "progress"
    ]
    # Read on from inside a run, a page folds what is left of it; `limit` counts lines.
    rest = await log.story(dataclasses.replace(ours, after=events[3].cursor), 2)
    assert [(line.event.name, line.folded) for line in rest] == [
        ("progress", 3),
        ("retrying", None),
    ]
    assert await log.story(dataclasses.replace(ours, after=events[-1].cursor), 10) == []
    assert await log.story(EventFilter(TenantId("another"), job_id=row["id"]), 10) == []


# SQLite's writers are serial: its ids are given in commit order.
@pytest.mark.parametrize("engine", ["postgres"], indirect=True)
async def test_an_older_transaction_that_commits_late_is_never_behind_a_read_cursor(
    engine: AsyncEngine,
) -> None:
    tenant = f"t-{uuid.uuid4().hex[:8]}"
    log = SqlaJobEventLog(engine)
    older, younger = _job(tenant), _job(tenant)
    async with engine.connect() as slow:
        transaction = await slow.begin()
        await slow.execute(insert(jobs).values(older))  # open, not committed
        async with engine.begin() as fast:
            await fast.execute(insert(jobs).values(younger))
        # The younger event is committed, but an older transaction could still add
        # events before it: a reader does not see it yet.
        assert await log.read(EventFilter(TenantId(tenant)), 10) == []
        head = await log.head()
        await transaction.commit()

    events = await log.read(EventFilter(TenantId(tenant)), 10)
    assert [e.job_id for e in events] == [older["id"], younger["id"]]
    # A stream that began at the head while both were open sees both.
    assert len(await log.read(EventFilter(TenantId(tenant), head), 10)) == 2


async def test_a_job_row_a_transaction_rolled_back_has_no_event(engine: AsyncEngine) -> None:
    tenant = f"t-{uuid.uuid4().hex[:8]}"
    async with engine.connect() as conn:
        transaction = await conn.begin()
        await conn.execute(insert(jobs).values(_job(tenant)))
        await transaction.rollback()
    async with engine.begin() as conn:
        await conn.execute(insert(jobs).values(_job(tenant)))

    assert len(await SqlaJobEventLog(engine).read(EventFilter(TenantId(tenant)), 10)) == 1


async def test_the_tip_is_the_last_event_that_can_be_read(engine: AsyncEngine) -> None:
    log = SqlaJobEventLog(engine)
    assert await log.tip() == START  # the engine's tables start empty
    for tenant in ("a-tenant", "another"):
        async with engine.begin() as conn:
            await conn.execute(insert(jobs).values(_job(tenant)))
    everything = await log.read(EventFilter(None), 10)

    assert len(everything) == 2
    assert await log.tip() == everything[-1].cursor
    assert await log.read(EventFilter(None, await log.tip()), 10) == []


async def test_retention_deletes_old_events_and_keeps_recent_ones(engine: AsyncEngine) -> None:
    tenant = f"t-{uuid.uuid4().hex[:8]}"
    for _ in range(5):
        async with engine.begin() as conn:
            await conn.execute(insert(jobs).values(_job(tenant)))
    async with engine.begin() as conn:
        ids = (await conn.execute(select(job_events.c.id).order_by(job_events.c.id))).scalars()
        old = list(ids)[:3]
        await conn.execute(
            update(job_events)
            .where(job_events.c.id.in_(old))
            .values(at=datetime.now(UTC) - timedelta(days=30))
        )
    log = SqlaJobEventLog(engine)

    deleted = await log.delete_before(datetime.now(UTC) - timedelta(days=7), 2)
    deleted += await log.delete_before(datetime.now(UTC) - timedelta(days=7), 2)

    assert deleted == 3
    left = await log.read(EventFilter(TenantId(tenant), START), 10)
    assert len(left) == 2
    assert not {e.cursor.id for e in left} & set(old)


@pytest.mark.parametrize("engine", ["postgres"], indirect=True)
async def test_a_jobs_events_follow_its_changes_when_an_older_transaction_waited_for_it(
    engine: AsyncEngine,
) -> None:
    # The older transaction takes its id first, then waits for the job's row, which a
    # younger one changes and commits: the older one's change comes second, and so does
    # its event.
    tenant = f"t-{uuid.uuid4().hex[:8]}"
    row = _job(tenant)
    async with engine.begin() as conn:
        await conn.execute(insert(jobs).values(row))
    async with engine.connect() as older, engine.connect() as younger:
        first = await older.begin()
        await older.execute(text("SELECT pg_current_xact_id()"))  # its id, now
        second = await younger.begin()
        await younger.execute(
            update(jobs).where(jobs.c.id == row["id"]).values(status="running", attempts=1)
        )
        waiting = asyncio.create_task(
            older.execute(update(jobs).where(jobs.c.id == row["id"]).values(status="cancelled"))
        )
        await asyncio.sleep(0.2)
        assert not waiting.done()  # it waits for the younger one's row lock
        await second.commit()
        await waiting
        await first.commit()

    events = await SqlaJobEventLog(engine).read(EventFilter(TenantId(tenant)), 10)

    assert [e.name for e in events] == ["enqueued", "started", "cancelled"]


@pytest.mark.parametrize("engine", ["postgres"], indirect=True)
async def test_a_jobs_stream_waits_for_its_last_event_rather_than_say_it_ended(
    engine: AsyncEngine,
) -> None:
    # The job has ended, but another transaction still open holds its last event back:
    # a client resuming after `started` gets a stream (not 204, "nothing follows"),
    # which hands `succeeded` out once it may.
    from types import SimpleNamespace

    from starlette.requests import Request

    from jobrail.events.api import job_events_response
    from jobrail.events.use_cases import JobEvents
    from jobrail.jobs.domain import JobStatus
    from jobrail.kernel.ids import JobId

    tenant = f"t-{uuid.uuid4().hex[:8]}"
    log = SqlaJobEventLog(engine)
    row = _job(tenant)
    async with engine.begin() as conn:
        await conn.execute(insert(jobs).values(row))
    async with engine.begin() as conn:
        await conn.execute(
            update(jobs).where(jobs.c.id == row["id"]).values(status="running", attempts=1)
        )
    started = (await log.read(EventFilter(TenantId(tenant)), 10))[-1].cursor
    async with engine.connect() as other:
        open_elsewhere = await other.begin()
        await other.execute(insert(jobs).values(_job("another-tenant")))
        async with engine.begin() as conn:
            await conn.execute(
                update(jobs).where(jobs.c.id == row["id"]).values(status="succeeded")
            )

        async def get(_query: object) -> object:
            return SimpleNamespace(id=JobId(row["id"]), status=JobStatus.SUCCEEDED)

        request = Request(
            {
                "type": "http",
                "method": "GET",
                "path": "/",
                "headers": [(b"accept", b"text/event-stream")],
                "query_string": b"",
            }
        )
        feed = JobEvents(log, poll_interval_s=0.05)
        response = await job_events_response(
            request,
            TenantId(tenant),
            JobId(row["id"]),
            get,
            feed,
            started,
            100,  # type: ignore[arg-type]
        )
        assert response.status_code == 200
        await open_elsewhere.commit()

    body = b""
    async for chunk in response.body_iterator:  # type: ignore[attr-defined]
        body += chunk if isinstance(chunk, bytes) else chunk.encode()
    assert b'"event":"succeeded"' in body  # and then the stream ended
