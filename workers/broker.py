"""``taskiq worker workers.broker:create_broker`` runs jobrail's workers.

Taskiq calls ``create_broker`` in each worker process: it loads the settings and
the modules named in them, registers one task per job type, and starts the
outbox relay with the worker.
"""

from taskiq import AsyncBroker

from jobrail.bootstrap import build_runtime, install_worker_lifecycle
from jobrail.settings import load_settings
from jobrail.telemetry.logging import configure_logging


def create_broker() -> AsyncBroker:
    settings = load_settings()
    configure_logging(settings.log_level)
    runtime = build_runtime(settings, worker=True)
    install_worker_lifecycle(runtime)
    return runtime.broker
