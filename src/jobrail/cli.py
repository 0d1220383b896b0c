"""The ``jobrail`` command.

jobrail run       embedded mode: migrate a SQLite file and serve the API with an
                  in-process worker (no services needed)
jobrail api       serve the API
jobrail worker    run Taskiq workers (JOBRAIL_WORKER__QUEUES selects queues)
jobrail scheduler enqueue the modules' periodic jobs (run two: one leads)
jobrail migrate   bring the database schema up to date
jobrail tenants   create tenants, issue and revoke their API keys (prints JSON)

Each command takes --app pkg.module:rail (or JOBRAIL_APP): an app's JobRail, whose
settings, modules and job types it runs with, besides the modules of JOBRAIL_MODULES.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
import uuid
from collections.abc import AsyncIterator, Sequence
from typing import TYPE_CHECKING, Any, NoReturn

# Nothing of jobrail is imported here: the command's own imports (about a second) run
# inside main, where a Ctrl-C is one line rather than a traceback.
if TYPE_CHECKING:
    from fastapi import FastAPI

    from jobrail.facade.rail import JobRail
    from jobrail.modules import Module
    from jobrail.persistence.schema import MigrationChain
    from jobrail.settings import Settings, SettingsError


def migrate(settings: Settings, modules: Sequence[Module] = ()) -> None:
    """The platform's Alembic chain, then the chains the modules name: those of the
    settings, then `modules` (see jobrail.persistence.schema). A chain two modules
    name runs once."""
    from jobrail.persistence.schema import sqlite_path, upgrade

    path = sqlite_path(settings.database)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
    upgrade(settings.database, _chains(settings, modules))


def _chains(settings: Settings, modules: Sequence[Module]) -> list[MigrationChain]:
    """The Alembic chains the modules of the settings, then `modules`, name."""
    from jobrail.modules import load_modules

    loaded = [*load_modules(settings.modules), *modules]
    return [chain for module in loaded for chain in module.migrations]


def _migrate_or_exit(
    settings: Settings, modules: Sequence[Module] = (), *, create_database: bool = False
) -> None:
    """`migrate` for a command (creating a Postgres database first if asked): an expected
    failure (a module that does not load, a database that cannot be reached or is ahead
    of this code) is one line and exit 1."""
    from alembic.util import CommandError

    from jobrail.jobs.ports import StoreUnavailableError
    from jobrail.modules import ModuleLoadError
    from jobrail.persistence.errors import database_errors
    from jobrail.persistence.schema import MigrationError

    try:
        with database_errors():
            if create_database and not settings.database.is_sqlite:
                from jobrail.persistence.admin import create_database_if_missing

                url = settings.database.url.get_secret_value()
                asyncio.run(create_database_if_missing(url))
            migrate(settings, modules)
    except StoreUnavailableError as exc:
        print(f"jobrail: cannot migrate the database: {exc}", file=sys.stderr)
        raise SystemExit(1) from None
    except (ModuleLoadError, MigrationError, CommandError) as exc:
        print(f"jobrail: cannot migrate the database: {exc}", file=sys.stderr)
        raise SystemExit(1) from None
    except Exception as exc:
        refusal = _connection_refused(exc)
        if refusal is None:
            raise
        print(f"jobrail: cannot migrate the database: {refusal}", file=sys.stderr)
        raise SystemExit(1) from None


def _check_schema_or_exit(settings: Settings, modules: Sequence[Module], app: str | None) -> None:
    """A serving process on a database that is not migrated for its modules (or a SQLite
    file that is not there) stops here in one line, exit 1, rather than with a traceback
    from its first query."""
    from jobrail.persistence.schema import MigrationError, not_up_to_date

    chains = _chains(settings, modules)  # a module that does not load: main's one line
    try:
        problem = not_up_to_date(settings.database, chains)
    except MigrationError as exc:
        problem = str(exc)
    except Exception as exc:  # noqa: BLE001 - the database's own error, told apart below
        # Refused (no such database, role or password): a mistake. Unreachable: an outage
        # the process waits out, as it does one that starts later.
        refusal = _connection_refused(exc)
        if refusal is not None:
            print(f"jobrail: cannot use the database: {refusal}", file=sys.stderr)
            raise SystemExit(1) from None
        return
    if problem is not None:
        command = "jobrail migrate" + (f" --app {app}" if app else "")
        print(
            f"jobrail: the database is not migrated: {problem} (run `{command}`)",
            file=sys.stderr,
        )
        raise SystemExit(1)


def _connection_refused(error: BaseException) -> str | None:
    """Why the database refused the connection, if it did: Postgres has no such database,
    role or password, or the SQLite file is not a database (asyncpg's or sqlite3's error
    is the cause of SQLAlchemy's). A mistake to fix, not an outage to wait out."""
    import sqlite3

    import asyncpg

    refusals = (asyncpg.InvalidCatalogNameError, asyncpg.InvalidAuthorizationSpecificationError)
    cause: BaseException | None = error
    while cause is not None:
        # The base class only: its subclass OperationalError includes a locked database.
        if type(cause) is sqlite3.DatabaseError:
            return f"the SQLite file is not a usable database ({cause})"
        if isinstance(cause, refusals):
            hint = " (`jobrail migrate --create-database` creates it)"
            return f"{cause}{hint if isinstance(cause, asyncpg.InvalidCatalogNameError) else ''}"
        cause = cause.__cause__
    return None


def _settings_refused(exc: SettingsError) -> NoReturn:
    """A setting refused by a serving process: the message, and no traceback."""
    print(f"jobrail: {exc}", file=sys.stderr)
    raise SystemExit(2) from None


def _check_schedules(app: Any, settings: Settings) -> None:
    """The embedded mode fires the schedules itself: a mistake in them (an unknown name,
    a bad cron) stops it here with the reason, not with a traceback from its start-up."""
    from jobrail.api.app import runtime_of
    from jobrail.scheduling.process import ScheduleConfigError, resolve_schedules

    runtime = runtime_of(app)
    try:
        resolve_schedules(runtime.modules, settings.scheduler, runtime.registry)
    except ScheduleConfigError as exc:
        print(f"jobrail: {exc}", file=sys.stderr)
        raise SystemExit(2) from None


def serve_api(settings: Settings, rail: JobRail | None = None) -> None:
    from jobrail.api.app import create_app, shutdown_hooks
    from jobrail.api.server import serve, uvicorn_options
    from jobrail.bootstrap import seeds_demo_tenant
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
            "no demo tenant outside SQLite: make one with `jobrail tenants create`",
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
    from jobrail.bootstrap import settle_heap

    started = app.router.lifespan_context

    @contextlib.asynccontextmanager
    async def lifespan(served: FastAPI) -> AsyncIterator[Any]:
        async with started(served) as state:
            settle_heap()
            yield state

    app.router.lifespan_context = lifespan


async def _tenants_command(settings: Settings, args: argparse.Namespace) -> dict[str, object]:
    from jobrail.kernel.clock import SystemClock
    from jobrail.kernel.errors import DomainError
    from jobrail.kernel.ids import TenantId
    from jobrail.persistence.engine import create_engine
    from jobrail.persistence.tenants import SqlaTenantDirectory
    from jobrail.tenants.use_cases import CreateTenant, IssueApiKey, RevokeApiKey

    engine = create_engine(settings.database)
    directory = SqlaTenantDirectory(engine)
    clock = SystemClock()
    try:
        if args.action == "create":
            issued = await CreateTenant(directory, clock)(args.name, admin=args.admin)
        elif args.action == "add-key":
            issued = await IssueApiKey(directory, clock)(TenantId(args.name))
        elif args.action == "revoke-key":
            revoked = await RevokeApiKey(directory, clock)(args.key_id)
            return {
                "tenant_id": revoked.tenant_id,
                "key_id": str(revoked.id),
                "hint": revoked.hint,
                "revoked_at": revoked.revoked_at.isoformat() if revoked.revoked_at else None,
            }
        else:
            return {
                "tenants": [
                    {
                        "tenant_id": tenant.id,
                        "admin": tenant.admin,
                        "keys": [
                            {
                                "key_id": str(key.id),
                                "hint": key.hint,
                                "created_at": key.created_at.isoformat(),
                                "revoked": key.revoked_at is not None,
                            }
                            for key in await directory.list_keys(tenant.id)
                        ],
                    }
                    for tenant in await directory.list_tenants()
                ]
            }
    except DomainError as exc:
        print(f"jobrail: {exc}", file=sys.stderr)
        raise SystemExit(1) from None
    finally:
        await engine.dispose()
    return {
        "tenant_id": issued.tenant_id,
        "api_key": issued.api_key,
        "key_id": str(issued.key_id),
        "admin": issued.admin,
    }


def _load_rail_or_exit(path: str) -> JobRail:
    """The app's JobRail at `path`, its settings read; a path that names none, or
    settings it refuses, is one line and exit 2."""
    from jobrail.facade.loading import AppLoadError, load_rail
    from jobrail.settings import SettingsError

    try:
        rail = load_rail(path)
        rail.settings  # noqa: B018 - read now, to refuse bad settings here
    except (AppLoadError, SettingsError) as exc:
        print(f"jobrail: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    return rail


def _check_job_catalog(settings: Settings, modules: Sequence[Module]) -> None:
    """The job types and events of the modules, or one line and exit 2."""
    from jobrail.bootstrap import job_catalog

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
    argv = [
        sys.executable,
        "-m",
        "taskiq",
        "worker",
        "jobrail.facade.worker:create_broker",
        "--workers",
        str(settings.worker.processes),
        "--max-async-tasks",
        str(settings.worker.max_async_tasks),
        "--wait-tasks-timeout",
        str(settings.worker.shutdown_grace_s),
        "--ack-type",
        "when_executed",
        # Job messages in batches, decoded once (see jobrail.messaging.receiver).
        "--receiver",
        "jobrail.messaging.receiver:JobReceiver",
        "--no-configure-logging",
        *extra,
    ]
    os.execvp(argv[0], argv)  # noqa: S606 - replace this process with Taskiq's worker


def main(argv: list[str] | None = None) -> None:
    try:
        _main(argv)
    except KeyboardInterrupt:
        # Ctrl-C before a server or worker took over its signals (while importing, or
        # migrating): nothing was left half-done that the next start does not finish.
        # What the interrupted loop leaves behind (a driver's connect future that failed
        # as its socket closed) is not the operator's news.
        import logging

        logging.getLogger("asyncio").setLevel(logging.CRITICAL)
        print("jobrail: interrupted", file=sys.stderr)
        raise SystemExit(130) from None


def _main(argv: list[str] | None) -> None:
    from jobrail.facade.loading import APP_ENV
    from jobrail.modules import ModuleLoadError
    from jobrail.settings import SettingsError, load_settings

    parser = argparse.ArgumentParser(
        prog="jobrail", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    app = argparse.ArgumentParser(add_help=False)
    app.add_argument(
        "--app",
        default=os.environ.get(APP_ENV) or None,
        metavar="PKG.MODULE:RAIL",
        help="an app's JobRail, whose settings, modules and job types to use "
        f"(default: ${APP_ENV})",
    )
    # `jobrail tenants list --app X` as well as `jobrail tenants --app X list`: the
    # actions take it too, without a default of their own (argparse would let an
    # action's default overwrite the value given before it).
    action_app = argparse.ArgumentParser(add_help=False)
    action_app.add_argument("--app", default=argparse.SUPPRESS, metavar="PKG.MODULE:RAIL")
    sub = parser.add_subparsers(dest="command", required=True)
    parents = [app]
    sub.add_parser(
        "run",
        help="embedded mode: migrate, then serve API and worker in one process",
        parents=parents,
    )
    sub.add_parser("api", help="serve the API", parents=parents)
    worker = sub.add_parser("worker", help="run Taskiq workers", parents=parents)
    worker.add_argument("taskiq_args", nargs=argparse.REMAINDER)
    sub.add_parser(
        "scheduler", help="enqueue periodic jobs (one leader among many)", parents=parents
    )
    migrate_parser = sub.add_parser("migrate", help="apply database migrations", parents=parents)
    migrate_parser.add_argument(
        "--create-database",
        action="store_true",
        help="create the Postgres database first if it does not exist",
    )
    tenants = sub.add_parser("tenants", help="tenants and API keys (prints JSON)", parents=parents)
    actions = tenants.add_subparsers(dest="action", required=True)
    create = actions.add_parser(
        "create", help="a new tenant and its first API key", parents=[action_app]
    )
    create.add_argument("name", help="lower-case letters, digits, '.', '_' or '-'")
    create.add_argument(
        "--admin", action="store_true", help="its keys may call the admin endpoints"
    )
    add_key = actions.add_parser(
        "add-key", help="another API key for a tenant (rotation)", parents=[action_app]
    )
    add_key.add_argument("name")
    revoke = actions.add_parser(
        "revoke-key", help="revoke an API key by its key_id", parents=[action_app]
    )
    revoke.add_argument("key_id", type=uuid.UUID)
    actions.add_parser("list", help="tenants and their keys (hints only)", parents=[action_app])
    args = parser.parse_args(argv)
    rail = None if args.app is None else _load_rail_or_exit(args.app)
    if rail is not None:
        settings = rail.settings
    else:
        try:
            settings = load_settings()
        except SettingsError as exc:
            print(f"jobrail: {exc}", file=sys.stderr)
            raise SystemExit(2) from None
    try:
        _command(args, settings, rail)
    except ModuleLoadError as exc:
        print(f"jobrail: {exc}", file=sys.stderr)
        raise SystemExit(2) from None


def _command(args: argparse.Namespace, settings: Settings, rail: JobRail | None) -> None:
    modules = rail.modules if rail is not None else []
    if args.command == "migrate":
        _migrate_or_exit(settings, modules, create_database=args.create_database)
    elif args.command == "run":
        if not settings.embedded:
            print(
                "jobrail run is the embedded mode; use `jobrail api` and `jobrail worker` "
                "for the stack",
                file=sys.stderr,
            )
            raise SystemExit(2)
        # Before migrating: a job type the settings refuse is one line, not a traceback
        # from the app's start-up after a migration.
        _check_job_catalog(settings, modules)
        _migrate_or_exit(settings, modules)
        serve_api(settings, rail)
    elif args.command == "api":
        _check_job_catalog(settings, modules)
        _check_schema_or_exit(settings, modules, args.app)
        serve_api(settings, rail)
    elif args.command == "worker":
        run_worker(settings, args.taskiq_args, args.app, modules)
    elif args.command == "scheduler":
        from jobrail.scheduling.process import ScheduleConfigError, run_scheduler

        _check_job_catalog(settings, modules)
        _check_schema_or_exit(settings, modules, args.app)
        try:
            run_scheduler(settings, modules)
        except ScheduleConfigError as exc:
            print(f"jobrail: {exc}", file=sys.stderr)
            raise SystemExit(2) from None
    elif args.command == "tenants":
        from jobrail.jobs.ports import StoreUnavailableError

        _check_schema_or_exit(settings, modules, args.app)
        try:
            print(json.dumps(asyncio.run(_tenants_command(settings, args))))
        except StoreUnavailableError as exc:
            print(
                f"jobrail: the database cannot be used ({exc}); is it there and migrated "
                "(`jobrail migrate`)?",
                file=sys.stderr,
            )
            raise SystemExit(1) from None


if __name__ == "__main__":
    main()
