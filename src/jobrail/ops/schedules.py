"""What the console shows of the schedules: each declared schedule with its next fire
time, its last fire (the newest job the scheduler enqueued for it) and which scheduler
process leads now.

The scheduler keeps no table of its own: a fired period is the job it enqueued (tenant
``_system``, the schedule's name as entity, ``<name>:<period start>`` as idempotency
key; see jobrail.scheduler.schedule), and the lead is a lock in the limits backend
(jobrail.scheduler.leadership), whose holder names the process (``host:pid:random``)."""

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Protocol

from jobrail.jobs.domain import Job
from jobrail.kernel.clock import Clock
from jobrail.limits.model import Acquire, LimitsBackend, LimitsUnavailableError, Lock
from jobrail.scheduler.leadership import LEADER_KEY
from jobrail.scheduler.schedule import Schedule


@dataclass(frozen=True, slots=True)
class DeclaredSchedules:
    """The schedules the loaded modules declare, with the settings' overrides applied
    (those switched off left out): what ``jobrail scheduler`` fires. `problem` says why
    the overrides could not be applied, when they could not (the declarations are then
    shown as declared)."""

    schedules: Sequence[Schedule]
    leader_ttl_s: float
    problem: str = ""


class ScheduleFires(Protocol):
    """The jobs the scheduler enqueued."""

    async def last_fired(self, schedule: str) -> Job | None:
        """The newest job enqueued for `schedule`, or None."""
        ...


@dataclass(frozen=True, slots=True)
class Leader:
    holder: str
    """The leading process: ``host:pid:random``."""
    until: datetime
    """When its lock ends unless renewed (every quarter of its life)."""


@dataclass(frozen=True, slots=True)
class ScheduleView:
    schedule: Schedule
    next_fire: datetime
    last_job: Job | None

    @property
    def last_period(self) -> str:
        """The period the last job was enqueued for (its key names it), or ''."""
        key = self.last_job.idempotency_key if self.last_job else None
        prefix = f"{self.schedule.name}:"
        return key[len(prefix) :] if key and key.startswith(prefix) else ""


@dataclass(frozen=True, slots=True)
class SchedulesView:
    schedules: list[ScheduleView]
    leaders: list[Leader] | None
    """Who holds the lead (one process, or none); None when the limits backend (Redis)
    cannot be asked."""
    problem: str


class ListSchedules:
    """Every schedule the processes fire, with its next fire time (after now, in UTC),
    its last fired job, and the scheduler process that leads now."""

    def __init__(
        self,
        declared: DeclaredSchedules,
        fires: ScheduleFires,
        backend: LimitsBackend,
        clock: Clock,
    ) -> None:
        self._declared = declared
        self._fires = fires
        self._backend = backend
        self._clock = clock
        lock = Lock(key=LEADER_KEY, ttl_s=declared.leader_ttl_s, name="scheduler-leader")
        self._lock = Acquire(lock, LEADER_KEY)

    async def __call__(self) -> SchedulesView:
        now = self._clock.now()
        shown = [
            ScheduleView(s, s.timing.next_after(now), await self._fires.last_fired(s.name))
            for s in self._declared.schedules
        ]
        try:
            held = await self._backend.holders(self._lock)
        except LimitsUnavailableError:
            return SchedulesView(shown, None, self._declared.problem)
        leaders = [
            Leader(str(h["holder"]), datetime.fromtimestamp(float(h["until_ms"]) / 1000, UTC))
            for h in held
        ]
        return SchedulesView(shown, leaders, self._declared.problem)
