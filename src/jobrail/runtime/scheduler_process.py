"""``jobrail scheduler``: a process built like the API and the workers (same settings,
modules and container), that consumes nothing and only enqueues.

Run two or more for availability: one leads (see leadership), the others stand by.
The embedded mode has no such process: ``jobrail run`` runs the same scheduler inside
itself (`start_embedded_scheduler`), its leader lock on the in-memory limits backend,
so that its housekeeping (pruning above all) happens there too.
"""

import asyncio
import dataclasses
import logging
import os
import signal
import socket
import uuid
from collections.abc import Sequence
from datetime import timedelta

from jobrail.jobs.enqueue import EnqueueJob
from jobrail.jobs.ports import JobCatalog
from jobrail.kernel.clock import Clock
from jobrail.kernel.errors import InvalidInputError
from jobrail.limits.model import LimitsBackend
from jobrail.modules import Module
from jobrail.runtime.bootstrap import Runtime, build_runtime
from jobrail.scheduler.leadership import Leadership
from jobrail.scheduler.loop import Scheduler
from jobrail.scheduler.schedule import Schedule
from jobrail.settings import SchedulerSettings, Settings

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
        if catalog.get(schedule.job_type) is None:
            raise ScheduleConfigError(
                f"schedule {name!r} names job type {schedule.job_type!r}, which no loaded "
                "module declares"
            )
        try:
            catalog.validate_payload(schedule.job_type, schedule.payload)
        except InvalidInputError as exc:
            raise ScheduleConfigError(f"schedule {name!r}: {exc} {exc.details}") from None
        schedules.append(schedule)
    return schedules


def holder_id() -> str:
    """Who holds the lead, as operators read it: host, pid and a random part."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


async def build_scheduler(runtime: Runtime) -> Scheduler:
    """The scheduler of a process, over its container: its leader lock in the limits
    backend (Redis in the stack, memory in the embedded mode)."""
    settings = runtime.settings.scheduler
    schedules = resolve_schedules(runtime.modules, settings, runtime.registry)
    leadership = Leadership(
        await runtime.container.get(LimitsBackend),
        holder_id(),
        timedelta(seconds=settings.leader_ttl_s),
    )
    return Scheduler(
        schedules,
        await runtime.container.get(EnqueueJob),
        leadership,
        await runtime.container.get(Clock),
        tick=timedelta(seconds=settings.tick_s),
        catch_up=timedelta(seconds=settings.catch_up_s),
    )


async def start_embedded_scheduler(runtime: Runtime) -> None:
    """Run the schedules inside an embedded-mode process until it stops its background
    tasks (`Runtime.stop_background`)."""
    if not runtime.settings.embedded or not runtime.settings.scheduler.embedded:
        return
    scheduler = await build_scheduler(runtime)
    # Never set: the task is cancelled at shutdown, and Scheduler.run resigns then.
    forever = asyncio.Event()
    runtime.run_in_background(scheduler.run(forever), name="scheduler")


async def serve(settings: Settings, modules: Sequence[Module] = ()) -> None:
    runtime = build_runtime(settings, worker=False, modules=modules)
    resolve_schedules(runtime.modules, settings.scheduler, runtime.registry)  # fail early
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    # Publishing only: enqueued jobs go out on the fast path after commit, and the
    # workers' relay publishes whatever that misses.
    await runtime.broker.startup()
    try:
        scheduler = await build_scheduler(runtime)
        await scheduler.run(stop)
    finally:
        await runtime.broker.shutdown()
        await runtime.container.close()
    log.info("scheduler: stopped", extra={"event": "scheduler.stopped"})


def run_scheduler(settings: Settings, modules: Sequence[Module] = ()) -> None:
    """The scheduler of the modules named in the settings, and of `modules` (a host's
    ``JobRail.module``, whose job types its schedules may enqueue)."""
    from jobrail.telemetry.logging import configure_logging

    if settings.embedded:
        raise SystemExit(
            "jobrail scheduler needs the stack mode (JOBRAIL_MODE=stack): it shares its "
            "leader lock through Redis and its jobs through Postgres and RabbitMQ "
            "(the embedded mode, jobrail run, fires its schedules itself)"
        )
    configure_logging(settings.log_level)
    asyncio.run(serve(settings, modules))
