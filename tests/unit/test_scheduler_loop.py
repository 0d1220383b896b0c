"""The scheduler loop on virtual time: every period of every schedule becomes exactly one
job, whoever leads, through the real EnqueueJob over a fake job store."""

import logging
from collections import Counter
from datetime import datetime, timedelta

import pytest
from pydantic import BaseModel

from jobrail.jobs.domain import Job
from jobrail.jobs.enqueue import EnqueueJob
from jobrail.jobs.registry import JobRegistry, job
from jobrail.kernel.errors import StoreUnavailableError
from jobrail.kernel.ids import JobId
from jobrail.outbox.committing import intake_units
from jobrail.scheduler import SYSTEM_TENANT, Schedule
from jobrail.scheduler.leadership import Leadership
from jobrail.scheduler.loop import Fired, Scheduler
from jobrail.transport.codec import Envelope
from tests.fakes import FakeDispatcher, FakeJobIntake
from tests.unit.scheduling_support import T0, FlakyLimits, Timeline

TTL = timedelta(seconds=4)
TICK = timedelta(seconds=0.25)
CATCH_UP = timedelta(seconds=30)


class Nothing(BaseModel):
    pass


@job("test.heartbeat", payload=Nothing)
async def heartbeat(payload: Nothing, ctx: object) -> None:
    return None


EVERY_5S = Schedule("heartbeat-5s", cron="*/5 * * * * *", job_type="test.heartbeat")
EVERY_2S = Schedule("heartbeat-2s", cron="*/2 * * * * *", job_type="test.heartbeat")


class FlakyIntake(FakeJobIntake):
    def __init__(self, store: dict[JobId, Job]) -> None:
        super().__init__(store)
        self.failures = 0

    async def add(self, job: Job, message: Envelope) -> Job:
        if self.failures:
            self.failures -= 1
            raise StoreUnavailableError("database unavailable")
        return await super().add(job, message)


class Fleet:
    """Schedulers sharing one lock backend and one job store, ticked in virtual time."""

    def __init__(self, schedules: list[Schedule]) -> None:
        self.timeline = Timeline()
        self.backend = FlakyLimits(self.timeline)
        self.jobs: dict[JobId, Job] = {}
        self.intake = FlakyIntake(self.jobs)
        registry = JobRegistry([heartbeat], queues=["jobs.default"], default_timeout_s=10)
        self.enqueue = EnqueueJob(
            intake_units(self.intake, FakeDispatcher()), registry, self.timeline, 3
        )
        self.schedules = schedules
        self.alive: dict[str, Scheduler] = {}
        self.created_by: dict[str, list[Fired]] = {}

    def start(self, name: str) -> Scheduler:
        leadership = Leadership(self.backend, name, TTL, monotonic=self.timeline.monotonic)
        scheduler = Scheduler(
            self.schedules,
            self.enqueue,
            leadership,
            self.timeline,
            tick=TICK,
            catch_up=CATCH_UP,
        )
        self.alive[name] = scheduler
        self.created_by.setdefault(name, [])
        return scheduler

    def kill(self, name: str) -> None:
        del self.alive[name]

    async def run(self, seconds: float) -> None:
        end = self.timeline.elapsed + seconds
        while self.timeline.elapsed < end:
            for name, scheduler in list(self.alive.items()):
                fired = await scheduler.tick()
                self.created_by[name] += [f for f in fired if f.created]
            self.timeline.advance(TICK.total_seconds())

    def job_keys(self) -> Counter[str]:
        return Counter(str(j.idempotency_key) for j in self.jobs.values())

    def lateness(self, schedule: Schedule) -> dict[datetime, float]:
        """Seconds from each period's start to its job's creation."""
        out = {}
        for j in self.jobs.values():
            name, _, start = str(j.idempotency_key).partition(":")
            if name == schedule.name:
                period = datetime.fromisoformat(start.replace("Z", "+00:00"))
                out[period] = (j.created_at - period).total_seconds()
        return out


def periods(schedule: Schedule, until_s: float, from_s: float = 0.0) -> list[str]:
    after = T0 + timedelta(seconds=from_s) - timedelta(microseconds=1)
    return [
        schedule.period_key(p) for p in schedule.periods(after, T0 + timedelta(seconds=until_s))
    ]


async def test_a_leader_enqueues_one_job_per_period_keyed_by_the_period_start() -> None:
    fleet = Fleet([EVERY_5S])
    fleet.start("a")

    await fleet.run(21)

    keys = fleet.job_keys()
    # From the start of the catch-up window (30 s ago, excluded) to now.
    assert sorted(keys) == periods(EVERY_5S, until_s=20.75, from_s=-29.99)
    assert set(keys.values()) == {1}
    assert "heartbeat-5s:2026-11-30T12:00:20Z" in keys
    assert all(j.tenant_id == SYSTEM_TENANT for j in fleet.jobs.values())
    assert all(j.entity_id == "heartbeat-5s" for j in fleet.jobs.values())
    assert all(j.type == "test.heartbeat" for j in fleet.jobs.values())


async def test_a_schedule_that_does_not_catch_up_fires_only_the_latest_period_due() -> None:
    present = Schedule("look-5s", "*/5 * * * * *", "test.heartbeat", catch_up=False)
    fleet = Fleet([present])
    fleet.start("a")

    await fleet.run(11)

    # Six periods of the catch-up window were due at the start: the latest alone fired,
    # then each period as it started.
    assert sorted(fleet.job_keys()) == periods(present, until_s=10.75, from_s=-0.01)


async def test_a_period_is_enqueued_as_it_starts() -> None:
    fleet = Fleet([EVERY_5S, EVERY_2S])
    fleet.start("a")

    await fleet.run(30)

    for schedule in (EVERY_5S, EVERY_2S):
        live = {p: late for p, late in fleet.lateness(schedule).items() if p >= T0}
        assert live
        assert max(live.values()) <= TICK.total_seconds()


async def test_two_schedulers_side_by_side_make_one_job_per_period_and_only_one_enqueues() -> None:
    fleet = Fleet([EVERY_5S, EVERY_2S])
    fleet.start("a")
    fleet.start("b")

    await fleet.run(60)

    keys = fleet.job_keys()
    for schedule in (EVERY_5S, EVERY_2S):
        assert set(periods(schedule, until_s=59.75)) <= set(keys)
    assert set(keys.values()) == {1}
    assert fleet.created_by["b"] == []
    assert len(fleet.created_by["a"]) == len(fleet.jobs)


async def test_when_the_leader_dies_the_next_fires_every_period_it_missed_late_by_at_most_ttl_and_a_tick() -> (  # noqa: E501
    None
):
    fleet = Fleet([EVERY_5S, EVERY_2S])
    fleet.start("a")
    fleet.start("b")
    await fleet.run(30)
    killed_at = T0 + timedelta(seconds=fleet.timeline.elapsed)

    fleet.kill("a")
    await fleet.run(30)

    keys = fleet.job_keys()
    bound = (TTL + TICK).total_seconds()
    for schedule in (EVERY_5S, EVERY_2S):
        assert set(periods(schedule, until_s=59.75)) <= set(keys)
        lateness = {p: late for p, late in fleet.lateness(schedule).items() if p >= T0}
        assert max(lateness.values()) <= bound
        assert max(lateness.values()) > TICK.total_seconds()  # the failover shows
    assert set(keys.values()) == {1}
    assert fleet.created_by["b"]
    first_by_b = min(f.period for f in fleet.created_by["b"])
    assert first_by_b > killed_at - timedelta(seconds=5)


async def test_periods_missed_for_longer_than_the_catch_up_window_are_skipped() -> None:
    fleet = Fleet([EVERY_5S])
    fleet.start("a")
    await fleet.run(10)

    fleet.backend.down = True  # Redis away for 60 s: nobody may lead
    await fleet.run(60)
    fleet.backend.down = False
    await fleet.run(1)

    keys = fleet.job_keys()
    assert "heartbeat-5s:2026-11-30T12:00:05Z" in keys
    assert "heartbeat-5s:2026-11-30T12:00:30Z" not in keys  # more than 30 s late
    assert set(periods(EVERY_5S, until_s=70, from_s=41)) <= set(keys)


async def test_periods_a_leader_could_not_enqueue_in_time_are_skipped_each_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    fleet = Fleet([EVERY_5S])
    fleet.start("a")
    await fleet.run(6)
    fleet.intake.failures = 10**6  # the database is away for a minute

    with caplog.at_level(logging.WARNING, logger="jobrail.scheduler"):
        await fleet.run(60)
        fleet.intake.failures = 0
        await fleet.run(6)

    messages = [r.getMessage() for r in caplog.records]
    skipped = [m for m in messages if "skipped" in m]
    assert [m.split(" from ")[1][11:19] for m in skipped] == [
        "12:00:10",
        "12:00:15",
        "12:00:20",
        "12:00:25",
        "12:00:30",
        "12:00:35",
    ]
    # One complaint per period that could not be enqueued, not one per tick.
    failures = [m for m in messages if "cannot enqueue" in m]
    assert len(failures) == len(set(failures)) == 7  # 12:00:10 to 12:00:40
    keys = fleet.job_keys()
    assert "heartbeat-5s:2026-11-30T12:00:05Z" in keys
    assert "heartbeat-5s:2026-11-30T12:00:35Z" not in keys
    assert set(periods(EVERY_5S, until_s=70, from_s=40)) <= set(keys)


async def test_a_scheduler_that_leads_again_takes_nothing_for_granted_from_its_last_term(
    caplog: pytest.LogCaptureFixture,
) -> None:
    fleet = Fleet([EVERY_5S])
    a = fleet.start("a")
    await fleet.run(10)
    del fleet.alive["a"]  # a stalls; b takes over
    fleet.start("b")
    await fleet.run(50)
    fleet.kill("b")
    fleet.alive["a"] = a  # a wakes up and leads again

    with caplog.at_level(logging.WARNING, logger="jobrail.scheduler"):
        await fleet.run(10)

    assert not [r for r in caplog.records if "skipped" in r.getMessage()]
    assert set(periods(EVERY_5S, until_s=69.75)) <= set(fleet.job_keys())
    assert set(fleet.job_keys().values()) == {1}


async def test_a_period_that_could_not_be_enqueued_is_enqueued_at_the_next_tick() -> None:
    fleet = Fleet([EVERY_5S])
    fleet.start("a")
    await fleet.run(4)
    fleet.intake.failures = 3

    await fleet.run(3)

    assert "heartbeat-5s:2026-11-30T12:00:05Z" in fleet.job_keys()
    assert fleet.lateness(EVERY_5S)[T0 + timedelta(seconds=5)] == pytest.approx(0.75)


async def test_a_standby_scheduler_enqueues_nothing() -> None:
    fleet = Fleet([EVERY_5S])
    fleet.start("a")
    await fleet.run(1)
    standby = fleet.start("b")
    del fleet.alive["a"]  # a still holds a live lock, but is not ticked for a moment

    fired = await standby.tick()

    assert fired == []
    assert standby.next_wake_in() == TICK.total_seconds()


async def test_the_leader_sleeps_until_the_next_fire_time() -> None:
    fleet = Fleet([EVERY_5S])
    scheduler = fleet.start("a")
    await scheduler.tick()
    fleet.timeline.advance(4.9)
    await scheduler.tick()

    assert scheduler.next_wake_in() == pytest.approx(0.1 + 0.005)
    fleet.timeline.advance(0.105)
    assert [f.period for f in await scheduler.tick()] == [T0 + timedelta(seconds=5)]


def test_two_schedules_may_not_share_a_name() -> None:
    fleet = Fleet([EVERY_5S, EVERY_5S])

    with pytest.raises(ValueError, match="unique"):
        fleet.start("a")
