"""The enqueue options' rules (jobrail.jobs.timing) and their HTTP model's command
(jobrail.jobs.options), against a fixed clock."""

from datetime import UTC, datetime, timedelta, timezone

import pytest
from fastapi.exceptions import RequestValidationError

from jobrail.jobs.options import EnqueueOptions
from jobrail.jobs.timing import CommandOptions, resolve_options
from jobrail.kernel.errors import InvalidInputError
from jobrail.kernel.ids import TenantId
from tests.fakes import START, FixedClock

PLUS_TWO = timezone(timedelta(hours=2))


def refused(**options: object) -> list[tuple[list[str], str]]:
    with pytest.raises(InvalidInputError) as caught:
        resolve_options(START, **options)  # type: ignore[arg-type]
    return [(detail["loc"], detail["type"]) for detail in caught.value.details]


def test_no_options_leave_the_command_as_it_was() -> None:
    assert resolve_options(START) == CommandOptions(None, None, None)


def test_a_delay_counts_from_the_clocks_now() -> None:
    assert resolve_options(START, delay=90).run_after == START + timedelta(seconds=90)
    assert resolve_options(START, delay=timedelta(minutes=5)).run_after == START + timedelta(
        minutes=5
    )
    assert resolve_options(START, delay=0).run_after == START


def test_times_are_kept_in_utc_and_the_options_pass_through() -> None:
    at = datetime(2030, 1, 1, 11, 0, tzinfo=PLUS_TWO)
    options = resolve_options(
        datetime(2029, 12, 31, tzinfo=UTC),
        run_at=at,
        deadline=at + timedelta(hours=1),
        unique_key="report-7",
    )

    assert options.run_after == datetime(2030, 1, 1, 9, 0, tzinfo=UTC)
    assert options.run_after.tzinfo is UTC
    assert options.deadline == datetime(2030, 1, 1, 10, 0, tzinfo=UTC)
    assert options.unique_key == "report-7"


def test_a_run_at_in_the_past_is_kept_and_due_at_once() -> None:
    past = START - timedelta(days=3)

    assert resolve_options(START, run_at=past).run_after == past


def test_options_that_do_not_hold_are_refused_each_by_name() -> None:
    naive = datetime(2030, 1, 1)  # the point: no zone
    assert refused(run_at=naive) == [(["run_at"], "timezone_aware")]
    assert refused(deadline=naive) == [(["deadline"], "timezone_aware")]
    assert refused(run_at=START, delay=1) == [(["delay"], "exclusive")]
    assert refused(delay=-1) == [(["delay"], "out_of_range")]
    assert refused(delay=float("inf")) == [(["delay"], "out_of_range")]
    assert refused(delay=timedelta(days=367)) == [(["delay"], "out_of_range")]
    assert refused(run_at=START + timedelta(days=367)) == [(["run_at"], "too_late")]
    assert refused(run_at=datetime(1999, 12, 31, tzinfo=UTC)) == [(["run_at"], "out_of_range")]
    assert refused(deadline=datetime(9999, 12, 31, 23, tzinfo=timezone(-timedelta(hours=5)))) == [
        (["deadline"], "out_of_range")
    ]
    assert refused(delay=60, deadline=START + timedelta(seconds=59)) == [
        (["deadline"], "not_after_start")
    ]
    assert refused(deadline=START - timedelta(seconds=1)) == [(["deadline"], "not_after_start")]
    assert refused(unique_key="") == [(["unique_key"], "string_too_short")]
    assert refused(unique_key="x" * 256) == [(["unique_key"], "string_too_long")]
    assert refused(unique_key="a\x00b") == [(["unique_key"], "control_characters")]


def test_a_deadline_must_be_after_the_start() -> None:
    options = resolve_options(START, delay=60, deadline=START + timedelta(seconds=61))

    assert options.deadline == START + timedelta(seconds=61)
    assert refused(delay=60, deadline=START + timedelta(seconds=60)) == [
        (["deadline"], "not_after_start")
    ]
    # A past run_at starts now: a deadline between the two has passed already.
    assert refused(run_at=START - timedelta(hours=1), deadline=START - timedelta(minutes=1)) == [
        (["deadline"], "not_after_start")
    ]


def test_the_http_options_make_the_command_at_the_apps_clock() -> None:
    clock = FixedClock(START)
    options = EnqueueOptions(delay=30, deadline=START + timedelta(minutes=1), unique_key="k")

    cmd = options.command(
        clock,
        tenant_id=TenantId("acme"),
        type="demo.echo",
        payload={"message": "x"},
        idempotency_key="i-1",
        entity_id="e-1",
    )

    assert (cmd.run_after, cmd.deadline, cmd.unique_key) == (
        START + timedelta(seconds=30),
        START + timedelta(minutes=1),
        "k",
    )
    assert (cmd.tenant_id, cmd.type, cmd.idempotency_key, cmd.entity_id) == (
        "acme",
        "demo.echo",
        "i-1",
        "e-1",
    )


def test_the_http_options_refusal_names_where_they_were_given() -> None:
    options = EnqueueOptions(delay=120, deadline=START + timedelta(minutes=1))

    with pytest.raises(RequestValidationError) as caught:
        options.command(FixedClock(START), tenant_id=TenantId("acme"), type="t.t", payload={})

    [error] = caught.value.errors()
    assert (error["loc"], error["type"]) == (("body", "deadline"), "not_after_start")
