"""Which schedules a scheduler runs: the modules' declarations with the settings'
overrides, checked against the job types at start-up."""

import pytest
from pydantic import BaseModel

from jobrail.jobs.registry import JobRegistry, job
from jobrail.modules import Module
from jobrail.runtime.modules import load_modules
from jobrail.runtime.schedules import ScheduleConfigError, resolve_schedules
from jobrail.scheduler import Schedule
from jobrail.settings import SchedulerSettings, Settings, load_settings
from tests.support.apps import REFERENCE


class Report(BaseModel):
    days: int = 1


@job("test.report", payload=Report)
async def report(payload: Report, ctx: object) -> None:
    return None


REGISTRY = JobRegistry([report], queues=["jobs.default"], default_timeout_s=10)


def module(*schedules: Schedule) -> Module:
    return Module(name="test", jobs=[report], schedules=schedules)


def settings(**schedules: object) -> SchedulerSettings:
    return SchedulerSettings.model_validate({"schedules": schedules})


DAILY = Schedule("daily-report", cron="0 6 * * *", job_type="test.report")
HOURLY = Schedule("hourly-report", cron="0 * * * *", job_type="test.report", payload={"days": 0})


def test_declared_schedules_run_as_declared_without_overrides() -> None:
    assert resolve_schedules([module(DAILY, HOURLY)], settings(), REGISTRY) == [DAILY, HOURLY]


def test_an_override_changes_a_schedules_cron_or_switches_it_off() -> None:
    resolved = resolve_schedules(
        [module(DAILY, HOURLY)],
        settings(**{"daily-report": {"cron": "30 7 * * *"}, "hourly-report": {"enabled": False}}),
        REGISTRY,
    )

    assert [(s.name, s.cron, s.payload) for s in resolved] == [("daily-report", "30 7 * * *", {})]


def test_overrides_come_from_the_environment_as_json(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(
        "JOBRAIL_SCHEDULER__SCHEDULES", '{"daily-report": {"cron": "*/5 * * * * *"}}'
    )

    loaded = load_settings().scheduler

    assert resolve_schedules([module(DAILY)], loaded, REGISTRY)[0].cron == "*/5 * * * * *"


@pytest.mark.parametrize(
    ("declared", "overrides", "problem"),
    [
        ([DAILY], {"nightly-report": {"enabled": False}}, "unknown schedules"),
        ([DAILY], {"daily-report": {"cron": "every day"}}, "five fields"),
        ([DAILY, DAILY], {}, "declared twice"),
        ([Schedule("ghost", cron="* * * * *", job_type="test.ghost")], {}, "no loaded module"),
        (
            [Schedule("bad-days", cron="* * * * *", job_type="test.report", payload={"days": "x"})],
            {},
            "payload does not fit",
        ),
    ],
)
def test_a_schedule_that_cannot_run_stops_the_scheduler_at_start_up(
    declared: list[Schedule], overrides: dict[str, object], problem: str
) -> None:
    with pytest.raises(ScheduleConfigError, match=problem):
        resolve_schedules([module(*declared)], settings(**overrides), REGISTRY)


def test_catch_up_must_cover_a_failover() -> None:
    with pytest.raises(ValueError, match="catch_up_s"):
        SchedulerSettings(leader_ttl_s=30, tick_s=1, catch_up_s=20)


def test_the_reference_application_schedules_housekeeping_and_billing_auto_pay() -> None:
    defaults = Settings()
    modules = [*load_modules(defaults.modules), *REFERENCE]
    registry = JobRegistry(
        (spec for m in modules for spec in m.jobs),
        queues=defaults.rabbit.queues,
        default_timeout_s=10,
    )

    resolved = resolve_schedules(modules, defaults.scheduler, registry)

    assert {(s.name, s.job_type) for s in resolved} == {
        ("prune-jobs", "maintenance.prune_jobs"),
        ("prune-messages", "maintenance.prune_messages"),
        ("outbox-lag", "maintenance.check_outbox_lag"),
        ("dlq-report", "maintenance.report_dead_letters"),
        ("overview-samples", "maintenance.sample_overview"),
        ("prune-workers", "workers_seen.prune_workers"),
        ("billing-auto-pay", "billing.auto_pay"),
    }
