"""The scheduler loop: while this process leads, enqueue every due period of every
schedule through ``EnqueueJob``, oldest first.

- A period is due from its start until ``catch_up`` after it. A leader fires each
  period as it starts; a new leader (after a failover, a restart, an outage) fires
  the periods nobody fired that are still due. Older ones are skipped, with a warning:
  a daily prune is not worth running three times after a weekend outage. A schedule
  declared with ``catch_up=False`` fires only the latest of the periods due.
- Firing a period twice is harmless: its job has the idempotency key
  ``<name>:<period start>``, so the second enqueue returns the first job. That is
  what makes a takeover safe without knowing what the old leader managed to fire.
- An enqueue that fails (the database is down) is tried again at the next tick while
  the period is still due; later periods of that schedule wait behind it. Each period
  that leaves the window unfired is logged as skipped.
- The loop sleeps until the next fire time, the next lock renewal or a tick,
  whichever comes first.
"""

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol

from jobrail.jobs.enqueue import EnqueueJobCommand, EnqueueResult
from jobrail.kernel.clock import Clock
from jobrail.kernel.errors import ConflictError
from jobrail.kernel.ids import JobId
from jobrail.scheduler.leadership import Leadership
from jobrail.scheduler.schedule import SYSTEM_TENANT, Schedule

log = logging.getLogger("jobrail.scheduler")

# Wake a little after a fire time, never a little before it.
WAKE_LATE_S = 0.005


class Enqueue(Protocol):
    async def __call__(self, cmd: EnqueueJobCommand) -> EnqueueResult: ...


@dataclass(frozen=True, slots=True)
class Fired:
    schedule: str
    period: datetime
    job_id: JobId | None
    """None when another enqueue holds the period's key (see _fire)."""
    created: bool


class Scheduler:
    def __init__(
        self,
        schedules: Sequence[Schedule],
        enqueue: Enqueue,
        leadership: Leadership,
        clock: Clock,
        *,
        tick: timedelta,
        catch_up: timedelta,
    ) -> None:
        names = [schedule.name for schedule in schedules]
        if len(set(names)) != len(names):
            raise ValueError(f"schedule names must be unique: {sorted(names)}")
        self._schedules = list(schedules)
        self._enqueue = enqueue
        self._leadership = leadership
        self._clock = clock
        self._tick_s = tick.total_seconds()
        self._catch_up = catch_up
        # The last period fired of each schedule, during the current term (fence).
        self._done: dict[str, datetime] = {}
        self._term: int | None = None
        self._failing: dict[str, datetime] = {}  # the period last reported unenqueued
        self._stuck = False

    @property
    def schedules(self) -> list[Schedule]:
        return list(self._schedules)

    async def tick(self) -> list[Fired]:
        """Take or keep the lead; if this process leads, fire what is due."""
        self._stuck = False
        if not await self._leadership.hold():
            return []
        if self._leadership.fence != self._term:
            # Someone else may have led meanwhile: what this process fired before is
            # no guide to what is missing now. The catch-up window is.
            self._term = self._leadership.fence
            self._done.clear()
        now = self._clock.now()
        fired: list[Fired] = []
        for schedule in self._schedules:
            fired += await self._fire_due(schedule, now)
        return fired

    async def _fire_due(self, schedule: Schedule, now: datetime) -> list[Fired]:
        oldest_due = now - self._catch_up
        done = self._done.get(schedule.name)
        if done is not None and done < oldest_due:
            first_missed = schedule.timing.next_after(done)
            if first_missed <= oldest_due:
                last_missed = schedule.timing.latest(oldest_due)
                log.warning(
                    "schedule %s: the periods from %s to %s were not fired in time; skipped",
                    schedule.name,
                    first_missed.isoformat(),
                    last_missed.isoformat(),
                    extra={"schedule": schedule.name, "skipped_from": first_missed},
                )
                done = self._done[schedule.name] = last_missed
        fired = []
        after = max(done, oldest_due) if done is not None else oldest_due
        due = list(schedule.periods(after, now))  # within the catch-up window: a few
        for period in due if schedule.catch_up else due[-1:]:
            if not self._leadership.is_leader:
                break
            result = await self._fire(schedule, period)
            if result is None:
                self._stuck = True
                break
            self._done[schedule.name] = period
            fired.append(result)
        return fired

    async def _fire(self, schedule: Schedule, period: datetime) -> Fired | None:
        key = schedule.period_key(period)
        command = EnqueueJobCommand(
            tenant_id=SYSTEM_TENANT,
            type=schedule.job_type,
            payload=schedule.payload,
            idempotency_key=key,
            entity_id=schedule.name,
        )
        try:
            result = await self._enqueue(command)
        except ConflictError as exc:
            # The key is taken (a concurrent fire, or a payload changed since): the
            # period has its job either way.
            log.warning("schedule %s: %s", schedule.name, exc, extra={"schedule": schedule.name})
            return Fired(schedule.name, period, None, created=False)
        except Exception as exc:  # noqa: BLE001 - the loop must outlive any failure
            # Once per period, not once per tick: an outage would flood the log.
            level = logging.DEBUG if self._failing.get(schedule.name) == period else logging.WARNING
            self._failing[schedule.name] = period
            log.log(
                level,
                "schedule %s: cannot enqueue the period %s (%s); trying again",
                schedule.name,
                period.isoformat(),
                exc,
                extra={"schedule": schedule.name, "period": period},
            )
            return None
        self._failing.pop(schedule.name, None)
        log.info(
            "schedule %s: %s job %s for %s",
            schedule.name,
            "enqueued" if result.created else "already had",
            result.job.id,
            key,
            extra={
                "event": "schedule.fired",
                "schedule": schedule.name,
                "period": period,
                "key": key,
                "job_id": str(result.job.id),
                "job_created": result.created,
                "holder": self._leadership.holder,
                "fence": self._leadership.fence,
            },
        )
        return Fired(schedule.name, period, result.job.id, result.created)

    def next_wake_in(self) -> float:
        """Seconds until the loop has something to do."""
        if not self._leadership.is_leader or self._stuck:
            return self._tick_s
        now = self._clock.now()
        waits = [self._tick_s, self._leadership.next_check_in()]
        for schedule in self._schedules:
            waits.append((schedule.timing.next_after(now) - now).total_seconds() + WAKE_LATE_S)
        return max(0.0, min(waits))

    async def run(self, stop: asyncio.Event) -> None:
        """Tick until `stop` is set, then hand the lead over."""
        log.info(
            "scheduler: %d schedules: %s",
            len(self._schedules),
            ", ".join(f"{s.name} ({s.cron})" for s in self._schedules),
            extra={"event": "scheduler.started", "holder": self._leadership.holder},
        )
        try:
            while not stop.is_set():
                try:
                    await self.tick()
                    wait_s = self.next_wake_in()
                except Exception:
                    log.exception("scheduler: tick failed; trying again")
                    wait_s = self._tick_s  # the loop goes on: the other schedules still fire
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), timeout=wait_s)
        finally:
            await self._leadership.resign()
