"""`main`, the ``jobrail`` command's entry point: it reads the command line and the app's
settings, runs the command, and turns what is expected to go wrong (an app or a module
that does not load, settings refused, Ctrl-C) into one line and an exit code.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import TYPE_CHECKING

from jobrail.cli.cancel import _cancel_command
from jobrail.cli.operating import RefusedError, _operator_command
from jobrail.cli.parser import _parser
from jobrail.cli.pauses import _pauses_command
from jobrail.cli.schema import _check_schema_or_exit, _migrate_or_exit, _up_to_date
from jobrail.cli.serving import _check_job_catalog, run_worker, serve_api
from jobrail.cli.tenants import _tenants_command
from jobrail.cli.workers import workers_command

# Nothing of jobrail is imported here but this package: the command's own imports (about
# a second) run inside main, where a Ctrl-C is one line rather than a traceback.
if TYPE_CHECKING:
    from collections.abc import Sequence

    from jobrail.facade.rail import JobRail
    from jobrail.modules import Module
    from jobrail.settings import Settings


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
    elif args.command == "workers":
        _check_schema_or_exit(settings, modules, args.app)
        workers_command(settings, args)
    elif args.command in ("jobs", "dlq", "queues") and getattr(args, "action", None) != "cancel":
        _operate(args, settings, modules)
    elif args.command in ("tenants", "pause", "resume", "pauses", "jobs"):
        from jobrail.kernel.errors import StoreUnavailableError

        _check_schema_or_exit(settings, modules, args.app)
        try:
            if args.command == "jobs":
                print(asyncio.run(_cancel_command(settings, args, modules)))
                return
            if args.command == "tenants":
                answer = asyncio.run(_tenants_command(settings, args))
            else:
                answer = asyncio.run(_pauses_command(settings, args, modules))
            print(json.dumps(answer))
        except StoreUnavailableError as exc:
            print(
                f"jobrail: the database cannot be used ({exc}); is it there and migrated "
                "(`jobrail migrate`)?",
                file=sys.stderr,
            )
            raise SystemExit(1) from None


def _operate(args: argparse.Namespace, settings: Settings, modules: Sequence[Module]) -> None:
    """`jobrail jobs`, `dlq` and `queues`: a table, or JSON with --json; what goes wrong
    is one line (exit 1, or 2 for what cannot be done here at all)."""
    from jobrail.kernel.errors import BrokerUnavailableError, DomainError, StoreUnavailableError

    _check_schema_or_exit(settings, modules, args.app)
    try:
        answer, text = asyncio.run(_operator_command(settings, args, modules))
    except RefusedError as exc:
        print(f"jobrail: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    except DomainError as exc:
        print(f"jobrail: {exc}", file=sys.stderr)
        raise SystemExit(1) from None
    except StoreUnavailableError as exc:
        print(f"jobrail: the database cannot be used ({exc})", file=sys.stderr)
        raise SystemExit(1) from None
    except BrokerUnavailableError as exc:
        print(f"jobrail: RabbitMQ cannot be used ({exc})", file=sys.stderr)
        raise SystemExit(1) from None
    print(json.dumps(answer) if args.json else text)


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
