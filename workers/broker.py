"""``taskiq worker workers.broker:create_broker`` runs jobrail's workers.

Taskiq calls ``create_broker`` in each worker process: it loads the settings and
the modules named in them, registers one task per job type, and starts the
outbox relay with the worker. Worker processes end without running ``atexit``
hooks, so the spans still in the batch are flushed at worker shutdown.
"""

import asyncio

from taskiq import AsyncBroker, TaskiqEvents, TaskiqState

from jobrail.bootstrap import build_runtime, install_worker_lifecycle
from jobrail.settings import load_settings
from jobrail.telemetry.logging import configure_logging
from jobrail.telemetry.tracing import configure_tracing, shutdown_tracing


def create_broker() -> AsyncBroker:
    settings = load_settings()
    configure_logging(settings.log_level)
    configure_tracing(settings.telemetry)
    runtime = build_runtime(settings, worker=True)
    install_worker_lifecycle(runtime)
    runtime.broker.add_event_handler(TaskiqEvents.WORKER_SHUTDOWN, _flush_spans)
    return runtime.broker


async def _flush_spans(_state: TaskiqState) -> None:
    # Exporting may wait on the collector: not on the event loop.
    await asyncio.to_thread(shutdown_tracing)
