"""Cron expressions read as periods: when a schedule fires, and which fire times fall
in a window of time.

An expression has five fields (minute hour day-of-month month day-of-week) or six with
seconds first, as in Quartz or node-cron: ``*/5 * * * * *`` fires every five seconds.
It is evaluated in the schedule's timezone (so ``0 3 * * *`` in ``Europe/Berlin`` is
03:00 there, across daylight-saving changes) and every time comes back in UTC.
croniter does the calendar arithmetic; nothing else in jobrail imports it.
"""

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterBadDateError, croniter


@dataclass(frozen=True, slots=True)
class Cron:
    expression: str
    timezone: str = "UTC"

    def __post_init__(self) -> None:
        if len(self.expression.split()) not in (5, 6) or not croniter.is_valid(
            self.expression, second_at_beginning=True
        ):
            raise ValueError(
                f"cron {self.expression!r}: use five fields (minute hour day month weekday) "
                "or six with seconds first"
            )
        try:
            ZoneInfo(self.timezone)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(f"unknown timezone {self.timezone!r}") from None
        try:
            self.next_after(datetime(2000, 1, 1, tzinfo=UTC))
        except CroniterBadDateError:
            # A date no calendar has (31 February): valid syntax that never fires. At
            # run time it was a traceback at every tick of the scheduler.
            raise ValueError(f"cron {self.expression!r} never fires (no such date)") from None

    def next_after(self, moment: datetime) -> datetime:
        """The first fire time strictly after `moment`."""
        return _utc(self._walk(moment).get_next(datetime))

    def latest(self, moment: datetime) -> datetime:
        """The last fire time at or before `moment`: the start of the period it is in."""
        following = self.next_after(moment)
        return _utc(self._walk(following).get_prev(datetime))

    def fires(self, after: datetime, until: datetime) -> Iterator[datetime]:
        """Every fire time in (`after`, `until`], oldest first."""
        walk = self._walk(after)
        while (moment := _utc(walk.get_next(datetime))) <= until:
            yield moment

    def _walk(self, start: datetime) -> "croniter[datetime]":
        if start.tzinfo is None:
            raise ValueError("naive datetime given; use timezone-aware datetimes")
        local = start.astimezone(ZoneInfo(self.timezone))
        return croniter(self.expression, local, ret_type=datetime, second_at_beginning=True)


def _utc(moment: datetime) -> datetime:
    return moment.astimezone(UTC)
