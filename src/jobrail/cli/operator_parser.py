"""The operators' commands on the command line: ``jobrail jobs``, ``jobrail dlq`` and
``jobrail queues``, their help and their options (jobrail.cli.parser adds them)."""

from __future__ import annotations

import argparse
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from jobrail.cli.help_text import CommandHelp

OPERATOR_HELP = {
    "jobs": CommandHelp(
        "list jobs of every tenant, show one, redrive a failed one, cancel",
        """\
Read and act on the jobs in the database at JOBRAIL_DATABASE__URL, every tenant's, as
the admin API does. Tables by default; --json prints the answer as JSON.

examples:
  jobrail jobs list --status failed --tenant acme --limit 20
  jobrail jobs show 0190f5d2-7a4c-7c6e-9d35-1b2c3d4e5f60
  jobrail jobs redrive 0190f5d2-7a4c-7c6e-9d35-1b2c3d4e5f60
  jobrail jobs cancel --type demo.echo --status pending""",
    ),
    "dlq": CommandHelp(
        "the dead-letter queue: list it, redrive a letter, purge it (stack mode)",
        """\
The dead-letter queue in RabbitMQ (JOBRAIL_RABBIT__URL), as the admin API's /admin/dlq:
list its letters oldest first (left in place), redrive one by its id (its job runs
again if that failure is its current one), or purge every letter (--yes).

examples:
  jobrail dlq list --limit 20
  jobrail dlq redrive 3f2a...
  jobrail dlq purge --yes""",
    ),
    "queues": CommandHelp(
        "messages waiting and consumers, per queue and the DLQ (stack mode)",
        """\
Messages ready and consumers of every work queue and of the dead-letter queue in
RabbitMQ (JOBRAIL_RABBIT__URL), as GET /admin/queues answers.""",
    ),
}

JOBS_HELP = {
    "list": CommandHelp(
        "jobs, newest first, filtered",
        """\
Jobs of every tenant (or --tenant's), newest first, filtered by --status, --type and
--queue, created --before a time; at most --limit (1 to 200, 50). A longer list ends
with the --after that shows the next page (jobs created in the same instant are never
skipped).""",
    ),
    "show": CommandHelp(
        "one job and its events", "A job of any tenant, with the first lines of its story."
    ),
    "redrive": CommandHelp(
        "run a failed job again",
        """\
Run a failed job again, with fresh attempts, and take its stale dead letters out of
the DLQ (stack mode: it needs RabbitMQ).""",
    ),
}

DLQ_HELP = {
    "list": CommandHelp("dead letters, oldest first", "Dead letters, oldest first, left in place."),
    "redrive": CommandHelp("redrive one dead letter by its id", "Redrive one dead letter."),
    "purge": CommandHelp("delete every dead letter (--yes)", "Delete every dead letter."),
}


def _before(text: str) -> datetime:
    """An ISO 8601 time; one without a zone is UTC."""
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an ISO 8601 time") from None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def _cursor(text: str) -> Any:
    """A page's cursor, as the list printed it."""
    from jobrail.kernel.errors import InvalidInputError
    from jobrail.ops.job_search import decode_cursor

    try:
        return decode_cursor(text)
    except InvalidInputError:
        raise argparse.ArgumentTypeError(f"{text[:40]!r} is not a cursor a list gave") from None


def _count(most: int) -> Callable[[str], int]:
    def count(text: str) -> int:
        try:
            number = int(text)
        except ValueError:
            number = 0
        if not 1 <= number <= most:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number from 1 to {most}")
        return number

    return count


def add_operator_commands(
    sub: Any, command: Callable[[Any, str, CommandHelp], argparse.ArgumentParser]
) -> Any:
    """Add ``jobs``, ``dlq`` and ``queues`` to `sub`; returns the subparsers of the
    actions of ``jobs`` (list, show, redrive), for another action to join them."""

    def leaf(of: Any, name: str, texts: CommandHelp) -> argparse.ArgumentParser:
        made = command(of, name, texts)
        made.add_argument("--json", action="store_true", help="print the answer as JSON")
        return made

    jobs = command(sub, "jobs", OPERATOR_HELP["jobs"])
    actions = jobs.add_subparsers(dest="action", required=True, metavar="ACTION")
    listed = leaf(actions, "list", JOBS_HELP["list"])
    listed.add_argument("--status", help="pending, running, retrying, succeeded, failed...")
    listed.add_argument("--type", help="a job type")
    listed.add_argument("--tenant", help="a tenant id")
    listed.add_argument("--queue", help="a queue, e.g. jobs.default")
    listed.add_argument("--limit", type=_count(200), default=50, help="1 to 200 (50)")
    listed.add_argument("--before", type=_before, metavar="TIME", help="created before")
    listed.add_argument("--after", type=_cursor, metavar="CURSOR", help="the next page")
    for name in ("show", "redrive"):
        leaf(actions, name, JOBS_HELP[name]).add_argument("job_id", type=uuid.UUID)

    dlq = command(sub, "dlq", OPERATOR_HELP["dlq"])
    letters = dlq.add_subparsers(dest="action", required=True, metavar="ACTION")
    leaf(letters, "list", DLQ_HELP["list"]).add_argument(
        "--limit", type=_count(1000), default=50, help="1 to 1000 (50)"
    )
    leaf(letters, "redrive", DLQ_HELP["redrive"]).add_argument("letter_id")
    leaf(letters, "purge", DLQ_HELP["purge"]).add_argument(
        "--yes", action="store_true", help="yes, delete every dead letter"
    )
    leaf(sub, "queues", OPERATOR_HELP["queues"])
    return actions
