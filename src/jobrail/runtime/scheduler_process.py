"""``jobrail scheduler``: a process built like the API and the workers (same settings,
modules and container), that consumes nothing and only enqueues.

Run two or more for availability: one leads (see leadership), the others stand by.
The embedded mode has no such process: ``jobrail run`` runs the same scheduler inside
itself (``Runtime.start_scheduler``), its leader lock on the in-memory limits backend,
so that its housekeeping (pruning above all) happens there too.
"""

import asyncio
import logging
import signal
from collections.abc import Sequence

from jobrail.modules import LoopProcess, Module
from jobrail.runtime.bootstrap import build_runtime
from jobrail.runtime.schedules import build_scheduler, resolve_schedules
from jobrail.settings import Settings

log = logging.getLogger("jobrail.scheduler")


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
        # The modules' loops that run here: fair dispatch's dispatcher, where
        # JOBRAIL_DISPATCH__RUN_IN names the scheduler.
        await runtime.start_loops(LoopProcess.SCHEDULER)
        scheduler = await build_scheduler(
            runtime.container, settings.scheduler, runtime.modules, runtime.registry
        )
        await scheduler.run(stop)
    finally:
        await runtime.stop_background()
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
