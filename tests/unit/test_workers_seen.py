"""The rule of a worker's state, and the heartbeat over a fake book: a beat that fails
is a warning and the next one tries again; a clean stop marks the worker stopped."""

import asyncio
import logging
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

import pytest

from jobrail.kernel.errors import StoreUnavailableError
from jobrail.workers_seen.model import WorkerBeat, state_of
from jobrail.workers_seen.use_cases import Heartbeat, Identity, ListWorkers

NOW = datetime(2026, 12, 6, 12, 0, tzinfo=UTC)
BEAT = timedelta(seconds=5)


def beat(at: datetime, stopped_at: datetime | None = None) -> WorkerBeat:
    return WorkerBeat("w1", "host", 7, "1.0", ("jobs.default",), 8, (), NOW, at, stopped_at)


class FixedClock:
    def __init__(self, now: datetime) -> None:
        self.at = now

    def now(self) -> datetime:
        return self.at


class FakeBook:
    def __init__(self) -> None:
        self.rows: dict[str, WorkerBeat] = {}
        self.away = False

    async def beat(self, worker: WorkerBeat) -> None:
        if self.away:
            raise StoreUnavailableError("database away")
        self.rows[worker.id] = worker

    async def stopped(self, worker_id: str, at: datetime) -> None:
        old = self.rows[worker_id]
        self.rows[worker_id] = WorkerBeat(
            old.id, old.host, old.pid, old.version, old.queues, old.concurrency, (),
            old.started_at, old.beat_at, at,
        )  # fmt: skip

    async def all(self) -> Sequence[WorkerBeat]:
        return list(self.rows.values())

    async def delete_quiet_before(self, cutoff: datetime) -> int:
        return 0


class Running:
    def __init__(self, *ids: str) -> None:
        self._ids = list(ids)

    def ids(self) -> list[str]:
        return self._ids


@pytest.mark.parametrize(
    ("last_beat", "stopped", "state"),
    [
        (NOW, None, "alive"),
        (NOW - 3 * BEAT, None, "alive"),  # three beats missed exactly: not yet
        (NOW - 3 * BEAT - timedelta(milliseconds=1), None, "gone"),
        (NOW - timedelta(hours=1), None, "gone"),
        (NOW, NOW, "stopped"),
        (NOW - timedelta(hours=1), NOW - timedelta(hours=1), "stopped"),
    ],
)
def test_a_worker_is_gone_after_three_missed_beats_and_stopped_once_it_says_so(
    last_beat: datetime, stopped: datetime | None, state: str
) -> None:
    assert state_of(beat(last_beat, stopped), NOW, BEAT) == state


async def test_a_failed_beat_warns_and_the_next_one_writes(
    caplog: pytest.LogCaptureFixture,
) -> None:
    book, clock = FakeBook(), FixedClock(NOW)
    me = Identity("w1", "host", 7, "1.0", ("jobs.default",), 8)
    heart = Heartbeat(book, Running("job-1"), clock, me, BEAT)
    book.away = True

    with caplog.at_level(logging.WARNING, logger="jobrail.workers"):
        failed = await heart.beat()
    book.away = False
    clock.at = NOW + BEAT
    written = await heart.beat()

    assert (failed, written) == (False, True)
    assert [r.levelno for r in caplog.records] == [logging.WARNING]
    assert book.rows["w1"].beat_at == NOW + BEAT
    assert book.rows["w1"].running == ("job-1",)


async def test_a_clean_stop_marks_the_worker_stopped() -> None:
    book, clock = FakeBook(), FixedClock(NOW)
    me = Identity("w1", "host", 7, "1.0", ("jobs.default",), 8)
    heart = Heartbeat(book, Running("job-1"), clock, me, BEAT)
    stop = asyncio.Event()
    stop.set()
    await heart.beat()

    await heart.run_forever(stop)
    listed = await ListWorkers(book, clock, BEAT)()
    counts = await ListWorkers(book, clock, BEAT).counts()

    assert [(seen.worker.id, seen.state, seen.worker.running) for seen in listed] == [
        ("w1", "stopped", ())
    ]
    assert counts == {"alive": 0, "gone": 0, "stopped": 1}
