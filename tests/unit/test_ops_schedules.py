"""What the console shows of schedules and limit holders: the leader from the scheduler's
own lock (the memory backend, as in the embedded mode), the last fired period from its
job's key, the schedules as declared with the reason when the overrides do not fit, and a
holder's job."""

from datetime import UTC, datetime, timedelta
from typing import Any

from jobrail.jobs.domain import Job
from jobrail.limits.memory import MemoryLimits
from jobrail.limits.model import Acquire, LimitsUnavailableError
from jobrail.modules import Module
from jobrail.ops.limit_catalog import Holder
from jobrail.ops.schedules import DeclaredSchedules, ListSchedules
from jobrail.runtime.schedules import declared_schedules
from jobrail.scheduler.leadership import Leadership
from jobrail.scheduler.schedule import Schedule
from jobrail.settings import SchedulerSettings
from tests.fakes import NO_TYPES, FixedClock, make_job

HOURLY = Schedule("hourly", cron="0 * * * *", job_type="t.hourly")
NIGHTLY = Schedule("nightly", cron="0 3 * * *", job_type="t.nightly")


class Fires:
    def __init__(self, jobs: dict[str, Job]) -> None:
        self.jobs = jobs

    async def last_fired(self, schedule: str) -> Job | None:
        return self.jobs.get(schedule)


class Unreachable(MemoryLimits):
    async def holders(self, item: Acquire) -> list[dict[str, Any]]:
        raise LimitsUnavailableError("connection refused")


def _fired(key: str) -> Job:
    return make_job(type="t.hourly", tenant_id="_system", idempotency_key=key)


async def test_the_leader_is_whoever_holds_the_schedulers_lock() -> None:
    clock = FixedClock(datetime(2026, 12, 6, 10, 20, tzinfo=UTC))
    backend = MemoryLimits()
    declared = DeclaredSchedules([HOURLY, NIGHTLY], leader_ttl_s=15)
    schedules = ListSchedules(declared, Fires({}), backend, clock)
    nobody = await schedules()

    leadership = Leadership(backend, "vm:4242:abcd1234", timedelta(seconds=15))
    assert await leadership.hold()
    leading = await schedules()
    await leadership.resign()
    after = await schedules()

    assert nobody.leaders == []
    assert [leader.holder for leader in leading.leaders or []] == ["vm:4242:abcd1234"]
    assert after.leaders == []
    assert [s.next_fire for s in leading.schedules] == [
        datetime(2026, 12, 6, 11, 0, tzinfo=UTC),
        datetime(2026, 12, 7, 3, 0, tzinfo=UTC),
    ]


async def test_the_last_fire_is_the_period_its_newest_job_was_keyed_by() -> None:
    clock = FixedClock(datetime(2026, 12, 6, 10, 20, tzinfo=UTC))
    fires = Fires({"hourly": _fired("hourly:2026-12-06T10:00:00Z")})
    declared = DeclaredSchedules([HOURLY, NIGHTLY], leader_ttl_s=15)

    view = await ListSchedules(declared, fires, MemoryLimits(), clock)()

    assert [(s.schedule.name, s.last_period) for s in view.schedules] == [
        ("hourly", "2026-12-06T10:00:00Z"),
        ("nightly", ""),
    ]


async def test_who_leads_is_unknown_when_redis_cannot_be_asked() -> None:
    declared = DeclaredSchedules([HOURLY], leader_ttl_s=15)

    view = await ListSchedules(declared, Fires({}), Unreachable(), FixedClock())()

    assert view.leaders is None
    assert [s.schedule.name for s in view.schedules] == ["hourly"]


def test_overrides_that_do_not_fit_show_the_schedules_as_declared_with_why() -> None:
    module = Module(name="m", schedules=[HOURLY])
    settings = SchedulerSettings(schedules={"nope": {"cron": "* * * * *"}})  # type: ignore[dict-item]

    shown = declared_schedules([module], settings, NO_TYPES)

    assert list(shown.schedules) == [HOURLY]
    assert "unknown schedules ['nope']" in shown.problem


def test_a_holder_names_its_job_when_a_jobs_admission_took_it() -> None:
    job = Holder.of({"holder": "01a24c87-357f-7f6c-baa2-687df06b131b/9f0e", "until_ms": 1e12})
    other = Holder.of({"holder": "vm:12:abcd", "until_ms": 1e12})
    odd = Holder.of({"holder": "not-a-uuid/9f0e", "until_ms": 1e12})

    assert job.job_id == "01a24c87-357f-7f6c-baa2-687df06b131b"
    assert (other.job_id, odd.job_id) == (None, None)
    assert job.until == datetime.fromtimestamp(1e9, UTC)
