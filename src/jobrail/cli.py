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

What ``jobrail --help`` and ``jobrail COMMAND --help`` show is written for an operator at
a terminal, in `HELP` below: this docstring is for the reader of the code.
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
from typing import TYPE_CHECKING, Any, NamedTuple, NoReturn

# Nothing of jobrail is imported here: the command's own imports (about a second) run
# inside main, where a Ctrl-C is one line rather than a traceback.
if TYPE_CHECKING:
    from fastapi import FastAPI

    from jobrail.facade.rail import JobRail
    from jobrail.modules import Module
    from jobrail.settings import Settings, SettingsError
    from jobrail.store.schema import MigrationChain


def migrate(settings: Settings, modules: Sequence[Module] = ()) -> None:
    """The platform's Alembic chain, then the chains the modules name: those of the
    settings, then `modules` (see jobrail.store.schema). A chain two modules
    name runs once."""
    from jobrail.store.schema import sqlite_path, upgrade

    path = sqlite_path(settings.database)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
    upgrade(settings.database, _chains(settings, modules))


def _chains(settings: Settings, modules: Sequence[Module]) -> list[MigrationChain]:
    """The Alembic chains the modules of the settings, then `modules`, name."""
    from jobrail.runtime.modules import load_modules

    loaded = [*load_modules(settings.modules), *modules]
    return [chain for module in loaded for chain in module.migrations]


def _migrate_or_exit(
    settings: Settings, modules: Sequence[Module] = (), *, create_database: bool = False
) -> None:
    """`migrate` for a command (creating a Postgres database first if asked): an expected
    failure (a module that does not load, a database that cannot be reached or is ahead
    of this code) is one line and exit 1."""
    from alembic.util import CommandError

    from jobrail.kernel.errors import StoreUnavailableError
    from jobrail.runtime.modules import ModuleLoadError
    from jobrail.store.errors import database_errors
    from jobrail.store.schema import MigrationError

    try:
        with database_errors():
            if create_database and not settings.database.is_sqlite:
                from jobrail.store.admin import create_database_if_missing

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


def _up_to_date(settings: Settings, modules: Sequence[Module]) -> str:
    """`jobrail migrate`'s answer once it has migrated: the database, without the user,
    password or options of its URL, and the revision of each chain, its head now."""
    from alembic.script import ScriptDirectory
    from sqlalchemy import URL, make_url

    from jobrail.store.schema import PLATFORM

    chains: list[MigrationChain] = []
    for chain in (PLATFORM, *_chains(settings, modules)):
        if chain not in chains:  # as `upgrade` runs them: the platform's first, each once
            chains.append(chain)
    revisions = ", ".join(
        f"{chain.name} {'+'.join(ScriptDirectory(str(chain.location)).get_heads())}"
        for chain in chains
    )
    url = make_url(settings.database.url.get_secret_value())
    shown = URL.create(url.drivername, host=url.host, port=url.port, database=url.database)
    return f"jobrail: database {shown.render_as_string()} is up to date ({revisions})"


def _check_schema_or_exit(settings: Settings, modules: Sequence[Module], app: str | None) -> None:
    """A serving process on a database that is not migrated for its modules (or a SQLite
    file that is not there) stops here in one line, exit 1, rather than with a traceback
    from its first query."""
    from jobrail.store.schema import MigrationError, not_up_to_date

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


async def _tenants_command(settings: Settings, args: argparse.Namespace) -> dict[str, object]:
    from jobrail.kernel.clock import SystemClock
    from jobrail.kernel.errors import DomainError
    from jobrail.kernel.ids import TenantId
    from jobrail.store.engine import create_engine
    from jobrail.store.tenants import SqlaTenantDirectory
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
    argv = taskiq_worker_argv(settings, extra)
    os.execvp(argv[0], argv)  # noqa: S606 - replace this process with Taskiq's worker


def taskiq_worker_argv(settings: Settings, extra: Sequence[str]) -> list[str]:
    """Taskiq's worker command for `jobrail worker`, with `extra` at its end: what was
    given after ``--`` (``jobrail worker -- --max-prefetch 10``). Without the ``--``
    argparse takes an option for one of jobrail's own, and with it Taskiq would take
    every option after it for a module name."""
    if extra[:1] == ["--"]:
        extra = extra[1:]
    return [
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
        # Job messages in batches, decoded once (see jobrail.transport.receiver).
        "--receiver",
        "jobrail.transport.receiver:JobReceiver",
        "--no-configure-logging",
        *extra,
    ]


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


class CommandHelp(NamedTuple):
    summary: str
    """Its line in the list of commands."""
    description: str
    """``jobrail COMMAND --help``: what it does, the settings it reads, an example."""


OVERVIEW = """\
jobrail: durable jobs for FastAPI services. One command per role: the API, the workers,
the scheduler, the database schema, and the tenants and their API keys.

Settings come from JOBRAIL_* environment variables (or a .env file here): JOBRAIL_MODE
(embedded, the default: one process and a SQLite file; or stack: Postgres, RabbitMQ and
Redis), JOBRAIL_DATABASE__URL, JOBRAIL_RABBIT__URL, JOBRAIL_REDIS__URL and the rest of
the README's Settings. Every command takes --app PKG.MODULE:RAIL (or JOBRAIL_APP): an
app's JobRail, whose settings, modules and job types it runs with, besides the modules
of JOBRAIL_MODULES. `jobrail COMMAND --help` says more about each command.

example:
  jobrail run                  # the API and its jobs on ./var/jobrail.db, no services"""

HELP = {
    "run": CommandHelp(
        "embedded mode: migrate, then serve the API and run the jobs in one process",
        """\
The embedded mode, no services needed: migrate the database (./var/jobrail.db unless
JOBRAIL_DATABASE__URL says otherwise), then serve the API on JOBRAIL_API__HOST and
JOBRAIL_API__PORT (127.0.0.1:8000) and run its jobs, its outbox relay and its schedules
in this process. On SQLite it seeds the admin tenant 'demo' with the API key
JOBRAIL_DEMO_API_KEY (demo-key). JOBRAIL_MODE must be embedded (the default).

example:
  JOBRAIL_API__PORT=8080 jobrail run --app myapp.main:rail""",
    ),
    "api": CommandHelp(
        "serve the API (in the stack mode, workers run the jobs)",
        """\
Serve the HTTP API on JOBRAIL_API__HOST and JOBRAIL_API__PORT (127.0.0.1:8000). In the
stack mode (JOBRAIL_MODE=stack) it writes jobs to Postgres (JOBRAIL_DATABASE__URL) for
`jobrail worker` processes to run from RabbitMQ (JOBRAIL_RABBIT__URL), with its rate
limits in Redis (JOBRAIL_REDIS__URL); in the embedded mode it runs them itself, as
`jobrail run` does, without migrating first. It refuses to start on a database that is
not migrated (`jobrail migrate`). Run as many as you need behind a load balancer.

example:
  JOBRAIL_MODE=stack JOBRAIL_DATABASE__URL=postgresql+asyncpg://app@db/jobrail jobrail api""",
    ),
    "worker": CommandHelp(
        "run the jobs of the queues in JOBRAIL_WORKER__QUEUES (stack mode)",
        """\
Run Taskiq worker processes that take jobs from RabbitMQ and run them (the stack mode
only: JOBRAIL_MODE=stack). JOBRAIL_WORKER__QUEUES picks the queues (comma-separated;
all by default), JOBRAIL_WORKER__PROCESSES the processes (1), and
JOBRAIL_WORKER__MAX_ASYNC_TASKS the jobs each runs at once (128). On SIGTERM a worker
takes no more jobs and lets its running ones finish within
JOBRAIL_WORKER__SHUTDOWN_GRACE_S (30). It needs the migrated database, RabbitMQ and
Redis (JOBRAIL_DATABASE__URL, JOBRAIL_RABBIT__URL, JOBRAIL_REDIS__URL).

examples:
  JOBRAIL_MODE=stack JOBRAIL_WORKER__QUEUES=jobs.heavy jobrail worker --app myapp.main:rail
  jobrail worker -- --max-prefetch 10    # Taskiq's own worker options, after --""",
    ),
    "scheduler": CommandHelp(
        "enqueue the modules' periodic jobs on time (run two: one leads)",
        """\
Enqueue the periodic jobs the modules declare, each on its schedule (overridden or
turned off by JOBRAIL_SCHEDULER__SCHEDULES), in the stack mode (JOBRAIL_MODE=stack;
`jobrail run` fires them itself). Run two for high availability: one leads, holding a
lock in Redis (JOBRAIL_REDIS__URL), and the other takes over within
JOBRAIL_SCHEDULER__LEADER_TTL_S (15) of its death.

example:
  JOBRAIL_MODE=stack jobrail scheduler --app myapp.main:rail""",
    ),
    "migrate": CommandHelp(
        "bring the database schema up to date (jobrail's and the modules' migrations)",
        """\
Run the Alembic migrations of the database at JOBRAIL_DATABASE__URL: jobrail's own
chain, then those of the modules (JOBRAIL_MODULES and --app's). The other commands
refuse a database that is not migrated, so run it before a deploy starts them. It
prints the database (without its credentials) and each chain's revision. The directory
of a SQLite file is made; a Postgres database only with --create-database.

example:
  JOBRAIL_DATABASE__URL=postgresql+asyncpg://app:pw@db/jobrail jobrail migrate --create-database""",
    ),
    "tenants": CommandHelp(
        "create tenants, issue and revoke their API keys (prints JSON)",
        """\
Manage the tenants and their API keys in the database at JOBRAIL_DATABASE__URL
(migrated: `jobrail migrate`). Each action prints one JSON object. A new key is shown
once: the database keeps only its digest and a short hint.

examples:
  jobrail tenants create acme            # a tenant and its first key
  jobrail tenants create ops --admin     # an operator's key, for the admin endpoints
  jobrail tenants add-key acme           # a second key, to rotate: deploy it, then...
  jobrail tenants revoke-key KEY_ID      # ...revoke the old one
  jobrail tenants list""",
    ),
}

TENANT_HELP = {
    "create": CommandHelp(
        "a new tenant and its first API key",
        """\
Create a tenant in the database at JOBRAIL_DATABASE__URL, with its first API key:
prints {"tenant_id", "api_key", "key_id", "admin"}, the only time the key is shown.
With --admin, its keys may also call the admin endpoints, across tenants.

example:
  jobrail tenants create acme""",
    ),
    "add-key": CommandHelp(
        "another API key for a tenant (rotation)",
        """\
Issue another API key for a tenant in the database at JOBRAIL_DATABASE__URL, to rotate
keys: deploy the new key, then revoke the old one (`jobrail tenants revoke-key`). Prints
{"tenant_id", "api_key", "key_id", "admin"}, the only time the key is shown.

example:
  jobrail tenants add-key acme""",
    ),
    "revoke-key": CommandHelp(
        "revoke an API key by its key_id",
        """\
Revoke an API key by the key_id that create, add-key and list print. A process that
has seen the key live trusts it for up to JOBRAIL_AUTH__KEY_CACHE_TTL_S (10) more
seconds. Prints {"tenant_id", "key_id", "hint", "revoked_at"}.

example:
  jobrail tenants revoke-key 0190f5d2-7a4c-7c6e-9d35-1b2c3d4e5f60""",
    ),
    "list": CommandHelp(
        "tenants and their keys (hints only)",
        """\
Every tenant in the database at JOBRAIL_DATABASE__URL, and its keys: key_id, hint,
created_at and whether it is revoked. The keys themselves are never shown (the database
does not have them).

example:
  jobrail tenants list""",
    ),
}


def _parser(app_env: str, version: str) -> argparse.ArgumentParser:
    plain = argparse.RawDescriptionHelpFormatter  # the texts above keep their lines
    parser = argparse.ArgumentParser(prog="jobrail", description=OVERVIEW, formatter_class=plain)
    parser.add_argument("--version", action="version", version=f"jobrail {version}")
    app_help = (
        f"an app's JobRail, whose settings, modules and job types to use (default: ${app_env})"
    )
    # Before the command or after it, and after a tenants action too. Only the top level
    # has a default: argparse lets a subcommand's default overwrite a value given before.
    parser.add_argument(
        "--app", default=os.environ.get(app_env) or None, metavar="PKG.MODULE:RAIL", help=app_help
    )
    app = argparse.ArgumentParser(add_help=False)
    app.add_argument("--app", default=argparse.SUPPRESS, metavar="PKG.MODULE:RAIL", help=app_help)

    def command(of: Any, name: str, texts: CommandHelp) -> argparse.ArgumentParser:
        made: argparse.ArgumentParser = of.add_parser(
            name,
            help=texts.summary,
            description=texts.description,
            formatter_class=plain,
            parents=[app],
        )
        return made

    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    command(sub, "run", HELP["run"])
    command(sub, "api", HELP["api"])
    worker = command(sub, "worker", HELP["worker"])
    worker.add_argument(
        "taskiq_args",
        nargs=argparse.REMAINDER,
        metavar="-- TASKIQ_OPTION",
        help="options for Taskiq's worker, after --",
    )
    command(sub, "scheduler", HELP["scheduler"])
    migrate_parser = command(sub, "migrate", HELP["migrate"])
    migrate_parser.add_argument(
        "--create-database",
        action="store_true",
        help="create the Postgres database first if it does not exist",
    )
    tenants = command(sub, "tenants", HELP["tenants"])
    actions = tenants.add_subparsers(dest="action", required=True, metavar="ACTION")
    create = command(actions, "create", TENANT_HELP["create"])
    create.add_argument("name", help="lower-case letters, digits, '.', '_' or '-'")
    create.add_argument(
        "--admin", action="store_true", help="its keys may call the admin endpoints"
    )
    command(actions, "add-key", TENANT_HELP["add-key"]).add_argument("name")
    revoke = command(actions, "revoke-key", TENANT_HELP["revoke-key"])
    revoke.add_argument("key_id", type=uuid.UUID)
    command(actions, "list", TENANT_HELP["list"])
    return parser


def _main(argv: list[str] | None) -> None:
    from jobrail.facade.loading import APP_ENV
    from jobrail.runtime.modules import ModuleLoadError
    from jobrail.settings import SettingsError, load_settings
    from jobrail.version import __version__

    args = _parser(APP_ENV, __version__).parse_args(argv)
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
        print(_up_to_date(settings, modules))
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
        from jobrail.runtime.scheduler_process import run_scheduler
        from jobrail.runtime.schedules import ScheduleConfigError

        _check_job_catalog(settings, modules)
        _check_schema_or_exit(settings, modules, args.app)
        try:
            run_scheduler(settings, modules)
        except ScheduleConfigError as exc:
            print(f"jobrail: {exc}", file=sys.stderr)
            raise SystemExit(2) from None
    elif args.command == "tenants":
        from jobrail.kernel.errors import StoreUnavailableError

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
