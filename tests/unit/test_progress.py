"""Progress reports: what one is (JobProgress), how an attempt's reports become a few
fenced writes (ProgressReporter), and what the runner does with them."""

import asyncio
import math
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

import pytest

from jobrail.jobs.domain import JobStatus
from jobrail.jobs.ports import ClaimToken
from jobrail.jobs.progress import JobProgress
from jobrail.kernel.errors import TransientError
from jobrail.kernel.ids import JobId
from jobrail.worker.context import JobContext
from jobrail.worker.progress import ProgressReporter
from tests.fakes import START, FakeJobStore, FixedClock, make_job
from tests.unit.test_runner import Harness

INTERVAL = timedelta(milliseconds=250)


@pytest.mark.parametrize(
    ("current", "total", "message", "says"),
    [
        (-1, None, None, "current must not be negative"),
        (1, -2.5, None, "total must not be negative"),
        (math.nan, None, None, "current must be finite"),
        (1, math.inf, None, "total must be finite"),
        (5, 4, None, "current (5) is larger than its total (4)"),
        (True, None, None, "current must be a number, not bool"),
        ("3", None, None, "current must be a number, not str"),
        (1, None, "x" * 201, "message is longer than 200 characters"),
        (1, None, "a\x00b", "message holds a NUL"),
    ],
)
def test_a_report_that_is_not_one_is_refused_naming_the_problem(
    current: Any, total: Any, message: Any, says: str
) -> None:
    with pytest.raises(ValueError, match=says.replace("(", r"\(").replace(")", r"\)")):
        JobProgress(current, total, message, START)


@pytest.mark.parametrize(
    ("current", "total", "message"),
    [(0, None, None), (3, 3, "done"), (0.5, 1.0, None), (10**20, None, "x" * 200)],
)
def test_finite_amounts_up_to_the_total_and_short_messages_are_reports(
    current: Any, total: Any, message: Any
) -> None:
    assert JobProgress(current, total, message, START).current == current


class Gate:
    """A sleep that lasts until the test opens it."""

    def __init__(self) -> None:
        self.waiting = 0
        self._open = asyncio.Event()

    async def sleep(self, seconds: float) -> None:
        assert seconds == INTERVAL.total_seconds()
        self.waiting += 1
        await self._open.wait()
        self._open.clear()

    def open(self) -> None:
        self._open.set()


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def claimed(store: FakeJobStore, clock: FixedClock) -> tuple[JobId, ClaimToken]:
    job = make_job()
    job.start(clock.now(), timedelta(seconds=30))
    store.jobs[job.id] = job
    return job.id, ClaimToken.of(job)


def reporter(store: FakeJobStore, gate: Gate | None = None) -> tuple[ProgressReporter, JobId]:
    clock = FixedClock()
    job_id, token = claimed(store, clock)
    sleep = gate.sleep if gate else asyncio.sleep
    return ProgressReporter(store, job_id, token, clock, INTERVAL, sleep), job_id


def progress_of(store: FakeJobStore, job_id: JobId) -> tuple[Any, Any, Any] | None:
    progress = store.jobs[job_id].progress
    return None if progress is None else (progress.current, progress.total, progress.message)


async def test_ten_thousand_reports_in_a_loop_are_two_writes_the_last_value_last() -> None:
    store, gate = FakeJobStore(), Gate()
    progress, job_id = reporter(store, gate)

    for n in range(10_000):
        progress.report(n, 10_000, f"row {n}")
        if n == 0:
            await settle()  # the first report is written at once
    await settle()
    assert store.progress_writes == 1
    assert progress_of(store, job_id) == (0, 10_000, "row 0")

    await progress.close()

    assert store.progress_writes == 2
    assert progress_of(store, job_id) == (9_999, 10_000, "row 9999")


async def test_the_latest_report_is_written_at_the_end_of_the_interval() -> None:
    store, gate = FakeJobStore(), Gate()
    progress, job_id = reporter(store, gate)

    progress.report(1)
    await settle()
    progress.report(2)
    progress.report(3, message="three")
    await settle()
    assert progress_of(store, job_id) == (1, None, None)

    gate.open()
    await settle()
    assert progress_of(store, job_id) == (3, None, "three")
    assert store.progress_writes == 2

    gate.open()  # an interval with no new report: nothing is written, the writer ends
    await settle()
    assert store.progress_writes == 2
    progress.report(4)  # so a later report is written at once
    await settle()
    assert progress_of(store, job_id) == (4, None, None)
    assert store.progress_writes == 3
    await progress.close()
    assert store.progress_writes == 3  # nothing left to write


async def test_close_with_nothing_reported_writes_nothing() -> None:
    store = FakeJobStore()
    progress, job_id = reporter(store)

    await progress.close()

    assert store.progress_writes == 0
    assert store.jobs[job_id].progress is None


async def test_a_write_the_database_fails_is_dropped_and_the_next_report_carries_on() -> None:
    store, gate = FakeJobStore(), Gate()
    progress, job_id = reporter(store, gate)
    store.unavailable_for = 1

    progress.report(1)  # raises nothing, now or later
    await settle()
    assert store.jobs[job_id].progress is None
    progress.report(2)
    gate.open()
    await settle()

    assert progress_of(store, job_id) == (2, None, None)


async def test_an_attempt_that_lost_its_claim_writes_no_progress() -> None:
    store = FakeJobStore()
    progress, job_id = reporter(store)
    taken_over = store.jobs[job_id]
    taken_over.lease_until = START
    taken_over.start(START + timedelta(seconds=1), timedelta(seconds=30))

    progress.report(1)
    await settle()
    progress.report(2)
    await progress.close()

    assert store.jobs[job_id].progress is None
    assert store.progress_writes == 0


async def test_a_report_that_is_not_one_raises_in_the_handler_and_writes_nothing() -> None:
    store = FakeJobStore()
    progress, _ = reporter(store)

    with pytest.raises(ValueError, match="finite"):
        progress.report(math.inf)
    await progress.close()

    assert store.calls == 0


class FailingProgress(FakeJobStore):
    async def write_progress(self, *args: Any) -> bool:
        raise RuntimeError("the progress column is broken")


async def test_a_handler_reporting_in_a_tight_loop_ends_with_its_final_progress() -> None:
    h = Harness()
    job = h.add()

    async def counting(payload: Mapping[str, Any], ctx: JobContext) -> dict[str, int]:
        for n in range(1, 10_001):
            await ctx.progress(n, 10_000)
        return {"rows": 10_000}

    done = await h.run(job, counting)

    assert done.status is JobStatus.SUCCEEDED
    assert done.progress is not None
    assert (done.progress.current, done.progress.total) == (10_000, 10_000)
    assert h.store.progress_writes <= 2


async def test_a_failed_attempt_keeps_the_progress_it_reported() -> None:
    h = Harness()
    job = h.add()

    async def halfway(payload: Mapping[str, Any], ctx: JobContext) -> None:
        await ctx.progress(50, 100, "half")
        await asyncio.sleep(0)
        await ctx.progress(60, 100, "more")
        raise TransientError("vendor timed out")

    done = await h.run(job, halfway)

    assert done.status is JobStatus.RETRYING
    assert done.progress is not None
    assert (done.progress.current, done.progress.message) == (60, "more")


async def test_progress_the_database_refuses_never_fails_the_job() -> None:
    h = Harness(store=FailingProgress())
    job = h.add()

    async def reporting(payload: Mapping[str, Any], ctx: JobContext) -> dict[str, bool]:
        await ctx.progress(1, 2)
        await asyncio.sleep(0)
        await ctx.progress(2, 2)
        return {"ok": True}

    done = await h.run(job, reporting)

    assert done.status is JobStatus.SUCCEEDED
    assert done.result == {"ok": True}
    assert done.progress is None


async def test_a_bad_report_is_the_handlers_error() -> None:
    h = Harness()
    job = h.add()

    async def bad(payload: Mapping[str, Any], ctx: JobContext) -> None:
        await ctx.progress(3, 2)

    done = await h.run(job, bad)

    assert done.status is not JobStatus.SUCCEEDED
    assert done.last_error is not None
    assert "larger than its total" in done.last_error
