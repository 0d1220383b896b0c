"""``jobrail workers``: every process that runs jobs, from its beats
(jobrail.workers_seen), as a table or as JSON; a database that cannot answer is one
line."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

# Nothing of jobrail is imported here (see jobrail.cli.command).
if TYPE_CHECKING:
    from jobrail.settings import Settings

SUMMARY = "the worker processes, their state and the jobs they run"
DESCRIPTION = """\
Every `jobrail worker` process and embedded runtime that beat within the last hour, from
the database at JOBRAIL_DATABASE__URL: its state (alive; gone once it missed three beats
of JOBRAIL_WORKER__BEAT_INTERVAL_S; stopped after a clean stop), host, pid, version,
queues, concurrency, the jobs it runs and its last beat. --json prints
{"workers": [...]} as GET /admin/workers does.

examples:
  jobrail workers
  jobrail workers --state gone --json"""

COLUMNS = ("state", "host", "pid", "version", "queues", "concurrency", "running", "beat_at")


def add_workers_command(sub: Any, parent: argparse.ArgumentParser) -> None:
    made = sub.add_parser(
        "workers",
        help=SUMMARY,
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        parents=[parent],
    )
    made.add_argument("--json", action="store_true", help="print JSON instead of a table")
    made.add_argument(
        "--state", choices=("alive", "gone", "stopped"), help="only the workers in this state"
    )


def workers_command(settings: Settings, args: argparse.Namespace) -> None:
    from jobrail.kernel.errors import StoreUnavailableError

    try:
        found = asyncio.run(_workers(settings))
    except StoreUnavailableError as exc:
        print(f"jobrail: the database cannot be used ({exc})", file=sys.stderr)
        raise SystemExit(1) from None
    rows = [row for row in found if args.state is None or row["state"] == args.state]
    if args.json:
        print(json.dumps({"workers": rows}))
        return
    print(table(rows, datetime.now(UTC)))


async def _workers(settings: Settings) -> list[dict[str, Any]]:
    from datetime import timedelta

    from jobrail.kernel.clock import SystemClock
    from jobrail.store.engine import close_engine, create_engine
    from jobrail.workers_seen.persistence import SqlaWorkerBook
    from jobrail.workers_seen.use_cases import ListWorkers

    engine = create_engine(settings.database)
    interval = timedelta(seconds=settings.worker.beat_interval_s)
    try:
        seen = await ListWorkers(SqlaWorkerBook(engine), SystemClock(), interval)()
    finally:
        await close_engine(engine)
    return [
        {
            "id": s.worker.id,
            "state": s.state,
            "host": s.worker.host,
            "pid": s.worker.pid,
            "version": s.worker.version,
            "queues": list(s.worker.queues),
            "concurrency": s.worker.concurrency,
            "running": list(s.worker.running),
            "started_at": s.worker.started_at.isoformat(),
            "beat_at": s.worker.beat_at.isoformat(),
            "stopped_at": s.worker.stopped_at.isoformat() if s.worker.stopped_at else None,
        }
        for s in seen
    ]


def table(rows: list[dict[str, Any]], now: datetime) -> str:
    """The workers as a plain table, one line each; the last beat as an age."""
    if not rows:
        return "no workers have beaten in the last hour"
    lines = [list(COLUMNS)]
    for row in rows:
        age = (now - datetime.fromisoformat(row["beat_at"])).total_seconds()
        cells = {
            **row,
            "queues": ",".join(row["queues"]),
            "running": ",".join(row["running"]) or "-",
            "beat_at": f"{max(age, 0):.0f}s ago",
        }
        lines.append([str(cells[name]) for name in COLUMNS])
    widths = [max(len(line[i]) for line in lines) for i in range(len(COLUMNS))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
        for line in lines
    )
