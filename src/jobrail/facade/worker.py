"""``jobrail worker`` runs Taskiq with ``create_broker`` here: each worker process builds
the runtime of a worker, for the modules of ``JOBRAIL_MODULES`` and, with ``--app
pkg.module:rail``, for the app's ``JobRail`` too (its module is imported, which declares
its job types). Without an app, ``JOBRAIL_MODULES`` unset is jobrail's sandbox default
(the demo), as for ``jobrail api`` without one. Worker processes end without running
``atexit`` hooks, so the spans still in the batch are flushed at worker shutdown. Once
started, a worker process settles its heap (``jobrail.runtime.bootstrap.settle_heap``)."""

import asyncio
import os

from taskiq import AsyncBroker, TaskiqEvents, TaskiqState

from jobrail.facade.loading import APP_ENV, load_rail
from jobrail.facade.rail import JobRail
from jobrail.runtime.bootstrap import install_worker_lifecycle, settle_heap
from jobrail.settings import SANDBOX_MODULES
from jobrail.telemetry.logging import configure_logging
from jobrail.telemetry.tracing import shutdown_tracing


def create_broker() -> AsyncBroker:
    path = os.environ.get(APP_ENV)
    rail = load_rail(path) if path else JobRail(default_modules=SANDBOX_MODULES)
    configure_logging(rail.settings.log_level)
    runtime = rail.build(worker=True)
    install_worker_lifecycle(runtime)
    runtime.broker.add_event_handler(TaskiqEvents.WORKER_SHUTDOWN, _flush_spans)
    # Last of the start-up handlers: a worker process is jobrail's own.
    runtime.broker.add_event_handler(TaskiqEvents.WORKER_STARTUP, _settle_heap)
    return runtime.broker


async def _settle_heap(_state: TaskiqState) -> None:
    settle_heap()


async def _flush_spans(_state: TaskiqState) -> None:
    # Exporting may wait on the collector: not on the event loop.
    await asyncio.to_thread(shutdown_tracing)
