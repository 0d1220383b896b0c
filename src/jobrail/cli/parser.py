"""The ``jobrail`` command line and the help it shows.

What ``jobrail --help`` and ``jobrail COMMAND --help`` show is written for an operator at
a terminal, here in `OVERVIEW`, `HELP` and `TENANT_HELP`: what each command does, the
settings it reads, an example. The reference page of the command line is generated from
`_parser` (docs/gen/sources.py).
"""

from __future__ import annotations

import argparse
import os
import uuid
from typing import Any

from jobrail.cli.cancel import CANCEL_HELP, add_cancel_arguments
from jobrail.cli.help_text import CommandHelp
from jobrail.cli.operator_parser import add_operator_commands
from jobrail.cli.workers import add_workers_command

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
    "pause": CommandHelp(
        "pause a queue, a job type or a tenant: none of its jobs starts (prints JSON)",
        """\
Pause a queue, a job type or a tenant in the database at JOBRAIL_DATABASE__URL: none of
its jobs starts until `jobrail resume`; running jobs finish, and nothing is lost (a
deadline that passes meanwhile ends its job expired). Its jobs already released to the
workers are held again. Prints {"scope", "value", "paused_at", "recalled"}.

examples:
  jobrail pause tenant acme
  jobrail pause queue jobs.heavy
  jobrail pause type reports.render""",
    ),
    "resume": CommandHelp(
        "resume what `jobrail pause` paused (prints JSON)",
        """\
Resume a queue, a job type or a tenant: its jobs are released again, in fair order, at
the dispatchers' next pass. Exit 1 if it is not paused.

example:
  jobrail resume tenant acme""",
    ),
    "pauses": CommandHelp(
        "what is paused (prints JSON)",
        """\
Every paused queue, job type and tenant, oldest first: {"pauses": [{"scope", "value",
"paused_at"}]}.""",
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
  jobrail tenants set-cap acme 1000      # at most 1000 jobs waiting to start
  jobrail tenants set-weight acme 3      # three times the default share of workers
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
    "set-cap": CommandHelp(
        "cap a tenant's jobs waiting to start",
        """\
Cap how many of a tenant's jobs may wait to start (pending or retrying) in the database
at JOBRAIL_DATABASE__URL: beyond it, its enqueues are refused with HTTP 429
(error queued_cap, with the cap) until some of its jobs start. `none` removes the cap.
The jobs already queued stay. Prints {"tenant_id", "max_queued"}.

examples:
  jobrail tenants set-cap acme 1000
  jobrail tenants set-cap acme none""",
    ),
    "set-weight": CommandHelp(
        "set a tenant's share of the workers under fair dispatch",
        """\
Set a tenant's weight under fair dispatch (JOBRAIL_DISPATCH__ENABLED), in the database
at JOBRAIL_DATABASE__URL: among the tenants with jobs waiting in a queue, each gets a
share of its workers in proportion to its weight (0.01 to 1000). `none` sets it back to
the default, 1. The dispatchers read it within a second, for the jobs already waiting
too. Prints {"tenant_id", "weight"}.

examples:
  jobrail tenants set-weight acme 3
  jobrail tenants set-weight acme none""",
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
    for name in ("pause", "resume"):
        scoped = command(sub, name, HELP[name])
        scoped.add_argument("scope", choices=("queue", "type", "tenant"), help="what to " + name)
        scoped.add_argument("value", help="its name: a queue, a job type or a tenant id")
    command(sub, "pauses", HELP["pauses"])
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
    cap = command(actions, "set-cap", TENANT_HELP["set-cap"])
    cap.add_argument("name")
    cap.add_argument("max_queued", type=_cap, help="a whole number of jobs, or none")
    weight = command(actions, "set-weight", TENANT_HELP["set-weight"])
    weight.add_argument("name")
    weight.add_argument("weight", type=_weight, help="a number from 0.01 to 1000, or none")
    command(actions, "list", TENANT_HELP["list"])
    job_actions = add_operator_commands(sub, command)
    add_cancel_arguments(command(job_actions, "cancel", CommandHelp(*CANCEL_HELP)))
    add_workers_command(sub, app)
    return parser


def _cap(text: str) -> int | None:
    """A cap as typed: a whole number, or `none`."""
    if text.strip().lower() == "none":
        return None
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number or none") from None


def _weight(text: str) -> float | None:
    """A weight as typed: a number, or `none` (the default)."""
    if text.strip().lower() == "none":
        return None
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number or none") from None
