"""The ``jobrail`` command.

jobrail run       embedded mode: migrate a SQLite file and serve the API with an
                  in-process worker (no services needed)
jobrail api       serve the API
jobrail worker    run Taskiq workers (JOBRAIL_WORKER__QUEUES selects queues)
jobrail migrate   bring the database schema up to date
"""

import argparse
import os
import sys
from pathlib import Path

from jobrail.settings import Settings, SettingsError, load_settings


def _project_root() -> Path:
    """Where alembic.ini and migrations/ are: the working directory, else the source tree."""
    cwd = Path.cwd()
    if (cwd / "alembic.ini").is_file():
        return cwd
    return Path(__file__).resolve().parents[2]


def migrate(settings: Settings) -> None:
    from alembic import command
    from alembic.config import Config

    if settings.database.is_sqlite:
        _ensure_sqlite_dir(settings.database.url.get_secret_value())
    root = _project_root()
    config = Config(str(root / "alembic.ini"))
    config.set_main_option("script_location", str(root / "migrations"))
    config.attributes["database_url"] = settings.database.url
    command.upgrade(config, "head")


def _ensure_sqlite_dir(url: str) -> None:
    path = url.split(":///", 1)[1] if ":///" in url else ""
    if path and path != ":memory:":
        Path(path).parent.mkdir(parents=True, exist_ok=True)


def serve_api(settings: Settings) -> None:
    import uvicorn

    from jobrail.api.app import create_app
    from jobrail.telemetry.logging import configure_logging

    configure_logging(settings.log_level)
    app = create_app(settings)
    uvicorn.run(
        app,
        host=settings.api.host,
        port=settings.api.port,
        log_config=None,
        access_log=False,
    )


def run_worker(settings: Settings, extra: list[str]) -> None:
    if settings.embedded:
        raise SystemExit(
            "jobrail worker needs the stack mode (JOBRAIL_MODE=stack): in embedded mode "
            "the API process runs the jobs itself"
        )
    argv = [
        sys.executable,
        "-m",
        "taskiq",
        "worker",
        "workers.broker:create_broker",
        "--workers",
        str(settings.worker.processes),
        "--max-async-tasks",
        str(settings.worker.max_async_tasks),
        "--wait-tasks-timeout",
        str(settings.worker.shutdown_grace_s),
        "--ack-type",
        "when_executed",
        "--no-configure-logging",
        *extra,
    ]
    os.execvp(argv[0], argv)  # noqa: S606 - replace this process with Taskiq's worker


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="jobrail", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("run", help="embedded mode: migrate, then serve API and worker in one process")
    sub.add_parser("api", help="serve the API")
    worker = sub.add_parser("worker", help="run Taskiq workers")
    worker.add_argument("taskiq_args", nargs=argparse.REMAINDER)
    migrate_parser = sub.add_parser("migrate", help="apply database migrations")
    migrate_parser.add_argument(
        "--create-database",
        action="store_true",
        help="create the Postgres database first if it does not exist",
    )
    args = parser.parse_args(argv)
    try:
        settings = load_settings()
    except SettingsError as exc:
        print(f"jobrail: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    if args.command == "migrate":
        if args.create_database and not settings.database.is_sqlite:
            import asyncio

            from jobrail.persistence.admin import create_database_if_missing

            asyncio.run(create_database_if_missing(settings.database.url.get_secret_value()))
        migrate(settings)
    elif args.command == "run":
        if not settings.embedded:
            print(
                "jobrail run is the embedded mode; use `jobrail api` and `jobrail worker` "
                "for the stack",
                file=sys.stderr,
            )
            raise SystemExit(2)
        migrate(settings)
        serve_api(settings)
    elif args.command == "api":
        serve_api(settings)
    elif args.command == "worker":
        run_worker(settings, args.taskiq_args)


if __name__ == "__main__":
    main()
