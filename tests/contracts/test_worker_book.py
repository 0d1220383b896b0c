"""The workers table on SQLite and Postgres: a beat is one upsert (the second updates the
row the first wrote), a clean stop marks it, and the prune deletes only rows quiet for
longer than it keeps."""

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from jobrail.workers_seen.model import WorkerBeat
from jobrail.workers_seen.persistence import SqlaWorkerBook
from jobrail.workers_seen.use_cases import PruneQuietWorkers
from tests.support.services import store_engine

NOW = datetime(2026, 12, 6, 12, 0, tzinfo=UTC)


@pytest.fixture(params=["sqlite", "postgres"])
async def engine(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[AsyncEngine]:
    engine = await store_engine(request, tmp_path, "workers")
    yield engine
    await engine.dispose()


class FixedClock:
    def now(self) -> datetime:
        return NOW


def beat(worker_id: str, at: datetime, running: tuple[str, ...] = ()) -> WorkerBeat:
    started = NOW - timedelta(hours=3)
    return WorkerBeat(worker_id, "host", 7, "1.0", ("jobs.default",), 8, running, started, at)


async def test_beats_upsert_one_row_and_a_stop_marks_it(engine: AsyncEngine) -> None:
    book = SqlaWorkerBook(engine)

    await book.beat(beat("w1", NOW - timedelta(seconds=5), ("job-1",)))
    await book.beat(beat("w1", NOW, ("job-2", "job-3")))
    await book.beat(beat("w2", NOW))
    await book.stopped("w2", NOW)
    rows = {row.id: row for row in await book.all()}

    assert set(rows) == {"w1", "w2"}
    assert (rows["w1"].beat_at, rows["w1"].running) == (NOW, ("job-2", "job-3"))
    assert rows["w1"].queues == ("jobs.default",)
    assert rows["w1"].stopped_at is None
    assert rows["w2"].stopped_at == NOW


async def test_the_prune_deletes_only_workers_quiet_for_longer_than_kept(
    engine: AsyncEngine,
) -> None:
    book = SqlaWorkerBook(engine)
    await book.beat(beat("alive", NOW))
    await book.beat(beat("gone-long", NOW - timedelta(hours=2)))
    await book.beat(beat("gone-lately", NOW - timedelta(minutes=10)))
    await book.beat(beat("stopped-long", NOW - timedelta(hours=2)))
    await book.stopped("stopped-long", NOW - timedelta(hours=2))

    deleted = await PruneQuietWorkers(book, FixedClock(), timedelta(hours=1))()

    assert deleted == 2
    assert {row.id for row in await book.all()} == {"alive", "gone-lately"}
