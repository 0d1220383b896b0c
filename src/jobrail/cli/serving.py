"""The serving processes: `jobrail run` and `jobrail api` serve the API, `jobrail worker`
becomes Taskiq's worker, and `jobrail scheduler` runs after the same checks.

What a serving process would otherwise find out only once started (a setting or a
schedule refused, a job type the settings refuse, a port it cannot listen on, a database
not migrated) stops it here, before anything starts, in one line.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import AsyncIterator, Sequence
from typing import TYPE_CHECKING, Any, NoReturn

from jobrail.cli.schema import _check_schema_or_exit

# Nothing of jobrail is imported here but this package (see jobrail.cli).
if TYPE_CHECKING:
    from fastapi import FastAPI

    from jobrail.facade.rail import JobRail
    from jobrail.modules import Module
    from jobrail.settings import Settings, SettingsError


def _settings_refused(exc: SettingsError) -> NoReturn:
    """A setting refused by a serving process: the message, and no traceback."""
    print(f"jobrail: {exc}", file=sys.stderr)
    raise SystemExit(2) from None


def _check_schedules(app: Any, settings: Settings) -> None:
    """The embedded mode fires the schedules itself: a mistake in them (an unknown name,
    a bad cron) stops it here with the reason, not with a traceback from its start-up."""
    from jobrail.runtime.app import runtime_of
    from jobrail.runtime.schedules import ScheduleConfigError, resolve_schedules

    runtime = runtime_of(app)
    try:
        resolve_schedules(runtime.modules, settings.scheduler, runtime.registry)
    except ScheduleConfigError as exc:
        print(f"jobrail: {exc}", file=sys.stderr)
        raise SystemExit(2) from None


def serve_api(settings: Settings, rail: JobRail | None = None) -> None:
    from jobrail.http.server import serve, uvicorn_options
    from jobrail.runtime.app import create_app, shutdown_hooks
    from jobrail.runtime.bootstrap import seeds_demo_tenant
    from jobrail.settings import SettingsError
    from jobrail.telemetry.logging import configure_logging

    configure_logging(settings.log_level)
    _check_can_listen(settings.api.host, settings.api.port)
    try:
        settings.check_can_serve(worker=False)
        # A module may refuse a setting too (the sync sandbox).
        app = create_app(settings) if rail is None else rail.app()
    except SettingsError as exc:
        _settings_refused(exc)
    if settings.embedded and settings.scheduler.embedded:
        _check_schedules(app, settings)
    if seeds_demo_tenant(settings):
        print(
            f"jobrail: embedded mode on http://{settings.api.host}:{settings.api.port} - "
            f"admin tenant 'demo', API key {settings.demo_api_key.get_secret_value()!r} "
            "(set JOBRAIL_DEMO_API_KEY to change it)",
            flush=True,
        )
    elif settings.embedded:
        print(
            f"jobrail: embedded mode on http://{settings.api.host}:{settings.api.port} - "
            "no demo tenant (none outside SQLite, nor without the demo module): make one with "
            "`jobrail tenants create`",
            flush=True,
        )
    _settle_heap_once_started(app)
    serve(
        app,
        shutdown_hooks(app),
        host=settings.api.host,
        port=settings.api.port,
        log_config=None,
        access_log=False,
        **uvicorn_options(
            settings.api.max_header_bytes,
            settings.api.header_timeout_s,
            settings.api.body_timeout_s,
        ),
    )


def _check_can_listen(host: str, port: int) -> None:
    """A port taken, or a host that is no address of this machine, is one line and exit
    1 before anything starts. uvicorn binds once the app's lifespan has run: the
    scheduler had taken the lead and fired its catch-up jobs, and the process ended with
    a log line and exit 3. (Bound and closed again: the server binds it a moment later.)"""
    import socket

    where = f"{host}:{port} (JOBRAIL_API__HOST, JOBRAIL_API__PORT)"
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
        with socket.socket(family, kind, proto) as probe:
            # As uvicorn binds: a port left in TIME_WAIT is free, one listened on is not.
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind(address)
    except OSError as exc:  # socket.gaierror too
        print(f"jobrail: cannot listen on {where}: {exc.strerror or exc}", file=sys.stderr)
        raise SystemExit(1) from None


def _settle_heap_once_started(app: FastAPI) -> None:
    """`jobrail api` owns its process: once the app's lifespan has started it (the
    broker, the relays, the pools), its heap is settled (`bootstrap.settle_heap`)."""
    from jobrail.runtime.bootstrap import settle_heap

    started = app.router.lifespan_context

    @contextlib.asynccontextmanager
    async def lifespan(served: FastAPI) -> AsyncIterator[Any]:
        async with started(served) as state:
            settle_heap()
            yield state

    app.router.lifespan_context = lifespan


def _check_job_catalog(settings: Settings, modules: Sequence[Module]) -> None:
    """The job types and events of the modules, or one line and exit 2."""
    from jobrail.runtime.bootstrap import job_catalog

    try:
        job_catalog(settings, modules)
    except ValueError as exc:
        print(f"jobrail: {exc}", file=sys.stderr)
        raise SystemExit(2) from None


def run_worker(
    settings: Settings, extra: list[str], app: str | None, modules: Sequence[Module]
) -> None:
    from jobrail.facade.loading import APP_ENV
    from jobrail.settings import SettingsError

    # For the worker processes' create_broker (jobrail.facade.worker).
    if app is None:
        os.environ.pop(APP_ENV, None)
    else:
        os.environ[APP_ENV] = app
    if settings.embedded:
        raise SystemExit(
            "jobrail worker needs the stack mode (JOBRAIL_MODE=stack): in embedded mode "
            "the API process runs the jobs itself"
        )
    try:
        settings.check_can_serve(worker=True)
    except SettingsError as exc:
        _settings_refused(exc)
    # Checked here, before Taskiq starts: in its worker processes a module that does not
    # load or a job type the settings refuse (an unknown queue, a name taken twice) is a
    # traceback, and the process is started again, for good.
    _check_job_catalog(settings, modules)
    _check_schema_or_exit(settings, modules, app)
    _supervise(taskiq_worker_args(settings, extra))


def _supervise(taskiq_args: list[str]) -> NoReturn:
    """Become Taskiq's worker supervisor, in this process: it forks the worker processes,
    which find the application and the broker's factory already imported here (the
    checks above loaded the application) instead of importing them again, and a worker
    process that dies is forked again as quickly. This replaced an exec of ``python -m
    taskiq worker``, whose start paid Taskiq's command-line start-up and a second
    import of everything: the first queue was consumed about 10 s after the start on a
    busy 2-core machine, now about 3.5 s.

    The heap is settled first (``settle_heap``: collected, then frozen), so that a
    worker process's collector does not write to the pages it shares with this one
    (which would copy them): the supervisor and one worker process hold 140 MB between
    them (proportional set size), where the exec'd supervisor and its worker held
    127 MB.

    Forking is safe while this process runs no other thread. A host application whose
    import started one (a client's background thread, an exporter) gets the exec
    instead: each worker process then imports it afresh, as before."""
    import threading

    from taskiq.cli.worker.cmd import WorkerCMD

    import jobrail.facade.worker  # noqa: F401 - imported once, for every worker process
    from jobrail.runtime.bootstrap import settle_heap

    if threading.active_count() > 1:
        argv = [sys.executable, "-m", "taskiq", "worker", *taskiq_args]
        os.execvp(argv[0], argv)  # noqa: S606 - replace this process with Taskiq's worker
    settle_heap()
    raise SystemExit(WorkerCMD().exec(taskiq_args) or 0)


def taskiq_worker_args(settings: Settings, extra: Sequence[str]) -> list[str]:
    """The arguments of Taskiq's worker command for `jobrail worker`, with `extra` at
    its end: what was given after ``--`` (``jobrail worker -- --max-prefetch 10``).
    Without the ``--`` argparse takes an option for one of jobrail's own, and with it
    Taskiq would take every option after it for a module name."""
    if extra[:1] == ["--"]:
        extra = extra[1:]
    return [
        "jobrail.facade.worker:create_broker",
        "--workers",
        str(settings.worker.processes),
        "--max-async-tasks",
        str(settings.worker.max_async_tasks),
        "--wait-tasks-timeout",
        str(settings.worker.shutdown_grace_s),
        "--ack-type",
        "when_executed",
        # Job messages in batches, decoded once (see jobrail.transport.receiver).
        "--receiver",
        "jobrail.transport.receiver:JobReceiver",
        "--no-configure-logging",
        *extra,
    ]
