"""The schedules a process fires: the modules' declarations with the settings' overrides,
checked against the job types, and the scheduler over a process's container (the
``jobrail scheduler`` process, or the embedded mode's own, see ``jobrail.runtime.bootstrap``)."""

import dataclasses
import logging
import os
import socket
import uuid
from collections.abc import Sequence
from datetime import timedelta

from dishka import AsyncContainer

from jobrail.jobs.enqueue import EnqueueJob
from jobrail.jobs.intake import JobCatalog
from jobrail.kernel.clock import Clock
from jobrail.kernel.errors import InvalidInputError
from jobrail.limits.model import LimitsBackend
from jobrail.modules import Module
from jobrail.ops.schedules import DeclaredSchedules
from jobrail.scheduler.leadership import Leadership
from jobrail.scheduler.loop import Scheduler
from jobrail.scheduler.schedule import Schedule
from jobrail.settings import SchedulerSettings

log = logging.getLogger("jobrail.scheduler")


class ScheduleConfigError(ValueError):
    """The declared schedules and their overrides do not fit together."""


def resolve_schedules(
    modules: Sequence[Module], settings: SchedulerSettings, catalog: JobCatalog
) -> list[Schedule]:
    """The modules' schedules with the settings' overrides applied, each checked against
    the job types: a mistake stops the process at start-up, not at 03:00."""
    declared: dict[str, Schedule] = {}
    for module in modules:
        for schedule in module.schedules:
            if schedule.name in declared:
                raise ScheduleConfigError(f"schedule {schedule.name!r} is declared twice")
            declared[schedule.name] = schedule
    unknown = set(settings.schedules) - set(declared)
    if unknown:
        raise ScheduleConfigError(
            f"JOBRAIL_SCHEDULER__SCHEDULES names unknown schedules {sorted(unknown)} "
            f"(declared: {', '.join(sorted(declared)) or 'none'})"
        )
    schedules = []
    for name, schedule in declared.items():
        override = settings.schedules.get(name)
        if override is not None and not override.enabled:
            continue
        if override is not None and override.cron is not None:
            try:
                schedule = dataclasses.replace(schedule, cron=override.cron)
            except ValueError as exc:
                raise ScheduleConfigError(str(exc)) from None
        job_type = catalog.get(schedule.job_type)
        if job_type is None:
            raise ScheduleConfigError(
                f"schedule {name!r} names job type {schedule.job_type!r}, which no loaded "
                "module declares"
            )
        try:
            job_type.validate_payload(schedule.payload)
        except InvalidInputError as exc:
            raise ScheduleConfigError(f"schedule {name!r}: {exc} {exc.details}") from None
        schedules.append(schedule)
    return schedules


def declared_schedules(
    modules: Sequence[Module], settings: SchedulerSettings, catalog: JobCatalog
) -> DeclaredSchedules:
    """What the console shows of the schedules: those `resolve_schedules` gives, or,
    when the overrides do not fit (the scheduler refuses to start then), every schedule
    as declared, with the reason."""
    ttl = settings.leader_ttl_s
    try:
        return DeclaredSchedules(resolve_schedules(modules, settings, catalog), ttl)
    except ScheduleConfigError as exc:
        declared = [schedule for module in modules for schedule in module.schedules]
        return DeclaredSchedules(declared, ttl, problem=str(exc))


def holder_id() -> str:
    """Who holds the lead, as operators read it: host, pid and a random part."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


async def build_scheduler(
    container: AsyncContainer,
    settings: SchedulerSettings,
    modules: Sequence[Module],
    catalog: JobCatalog,
) -> Scheduler:
    """The scheduler of a process, over its container: its leader lock in the limits
    backend (Redis in the stack, memory in the embedded mode)."""
    schedules = resolve_schedules(modules, settings, catalog)
    leadership = Leadership(
        await container.get(LimitsBackend),
        holder_id(),
        timedelta(seconds=settings.leader_ttl_s),
    )
    return Scheduler(
        schedules,
        await container.get(EnqueueJob),
        leadership,
        await container.get(Clock),
        tick=timedelta(seconds=settings.tick_s),
        catch_up=timedelta(seconds=settings.catch_up_s),
    )
