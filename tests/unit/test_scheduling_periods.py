"""When a schedule fires, and how each of its periods is named: cron read as periods."""

from datetime import UTC, datetime, timedelta

import pytest

from jobrail.scheduler import SYSTEM_TENANT, Schedule
from jobrail.scheduler.cron import Cron
from jobrail.tenants.domain import TENANT_NAME

NOV_30 = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)


def at(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def test_a_daily_schedule_has_one_period_a_day_starting_at_its_cron_time() -> None:
    daily = Schedule("prune-jobs", cron="0 3 * * *", job_type="maintenance.prune_jobs")

    periods = list(daily.periods(at("2026-11-29T12:00:00"), at("2026-12-02T12:00:00")))

    assert periods == [
        at("2026-11-30T03:00:00"),
        at("2026-12-01T03:00:00"),
        at("2026-12-02T03:00:00"),
    ]


def test_a_six_field_cron_has_seconds_first() -> None:
    every_5s = Cron("*/5 * * * * *")

    assert list(every_5s.fires(NOV_30, NOV_30 + timedelta(seconds=12))) == [
        NOV_30 + timedelta(seconds=5),
        NOV_30 + timedelta(seconds=10),
    ]


def test_the_periods_in_a_window_exclude_its_start_and_include_its_end() -> None:
    every_5s = Cron("*/5 * * * * *")

    fires = list(every_5s.fires(NOV_30, NOV_30 + timedelta(seconds=10)))

    assert fires == [NOV_30 + timedelta(seconds=5), NOV_30 + timedelta(seconds=10)]


def test_any_moment_belongs_to_the_period_of_the_last_fire_time_at_or_before_it() -> None:
    every_5s = Cron("*/5 * * * * *")

    assert every_5s.latest(NOV_30) == NOV_30
    assert every_5s.latest(NOV_30 + timedelta(seconds=4.999)) == NOV_30
    assert every_5s.latest(NOV_30 + timedelta(seconds=5)) == NOV_30 + timedelta(seconds=5)
    assert every_5s.next_after(NOV_30) == NOV_30 + timedelta(seconds=5)
    assert every_5s.next_after(NOV_30 - timedelta(microseconds=1)) == NOV_30


def test_periods_with_uneven_gaps_follow_the_calendar() -> None:
    every_7s = Cron("*/7 * * * * *")

    fires = list(every_7s.fires(at("2026-11-30T12:00:50"), at("2026-11-30T12:01:08")))

    assert fires == [
        at("2026-11-30T12:00:56"),
        at("2026-11-30T12:01:00"),
        at("2026-11-30T12:01:07"),
    ]


def test_a_schedule_in_another_timezone_fires_at_its_local_time_across_dst() -> None:
    berlin = Cron("0 3 * * *", timezone="Europe/Berlin")

    fires = list(berlin.fires(at("2026-03-28T00:00:00"), at("2026-03-30T12:00:00")))

    # 03:00 in Berlin is 02:00 UTC in winter, 01:00 UTC from 29 March (CEST).
    assert fires == [
        at("2026-03-28T02:00:00"),
        at("2026-03-29T01:00:00"),
        at("2026-03-30T01:00:00"),
    ]
    assert all(moment.tzinfo is UTC for moment in fires)


def test_the_period_key_is_the_schedule_name_and_the_period_start_in_utc() -> None:
    daily = Schedule("prune-jobs", cron="0 3 * * *", job_type="maintenance.prune_jobs")
    start = datetime.fromisoformat("2026-11-30T04:00:00+01:00")

    assert daily.period_key(start) == "prune-jobs:2026-11-30T03:00:00Z"


def test_scheduled_jobs_belong_to_a_tenant_no_one_can_create() -> None:
    assert not TENANT_NAME.match(SYSTEM_TENANT)


@pytest.mark.parametrize(
    ("name", "cron", "timezone", "problem"),
    [
        ("prune-jobs", "0 3 * *", "UTC", "five fields"),
        ("prune-jobs", "0 3 * * * * *", "UTC", "five fields"),
        ("prune-jobs", "0 25 * * *", "UTC", "five fields"),
        ("prune-jobs", "0 3 * * *", "Mars/Olympus", "unknown timezone"),
        ("Prune Jobs", "0 3 * * *", "UTC", "lower-case"),
        ("prune-jobs:daily", "0 3 * * *", "UTC", "lower-case"),
        # Valid syntax, no such date: a traceback at every tick, and the loop stopped.
        ("prune-jobs", "0 0 31 2 *", "UTC", "never fires"),
        ("prune-jobs", "0 0 31 4 *", "Europe/Berlin", "never fires"),
    ],
)
def test_a_bad_schedule_is_refused_when_it_is_declared(
    name: str, cron: str, timezone: str, problem: str
) -> None:
    with pytest.raises(ValueError, match=problem):
        Schedule(name, cron=cron, job_type="maintenance.prune_jobs", timezone=timezone)


def test_a_cron_that_fires_once_in_four_years_is_a_schedule() -> None:
    leap_day = Schedule("leap-day", cron="0 0 29 2 *", job_type="maintenance.prune_jobs")

    fire = leap_day.timing.next_after(datetime(2026, 12, 5, tzinfo=UTC))

    assert fire == datetime(2028, 2, 29, tzinfo=UTC)
