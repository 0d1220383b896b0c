"""``jobrail worker --app pkg.module:rail`` runs Taskiq with ``create_broker`` here: each
worker process imports the host's module, whose ``JobRail`` declares the job types, and
builds the rail's runtime as a worker, as ``workers.broker`` does for the modules of
``JOBRAIL_MODULES``."""

import asyncio
import os

from taskiq import AsyncBroker, TaskiqEvents, TaskiqState

from jobrail.bootstrap import install_worker_lifecycle
from jobrail.facade.loading import load_rail
from jobrail.telemetry.logging import configure_logging
from jobrail.telemetry.tracing import shutdown_tracing

APP_ENV = "JOBRAIL_APP"
"""Where ``jobrail worker --app`` leaves the path for its worker processes."""


def create_broker() -> AsyncBroker:
    rail = load_rail(os.environ[APP_ENV])
    configure_logging(rail.settings.log_level)
    runtime = rail.build(worker=True)
    install_worker_lifecycle(runtime)
    runtime.broker.add_event_handler(TaskiqEvents.WORKER_SHUTDOWN, _flush_spans)
    return runtime.broker


async def _flush_spans(_state: TaskiqState) -> None:
    # Exporting may wait on the collector: not on the event loop.
    await asyncio.to_thread(shutdown_tracing)
