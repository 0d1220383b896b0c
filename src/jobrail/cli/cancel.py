"""``jobrail jobs cancel``: cancel one job by its id, or every job a filter takes, of
any tenant or one, on the database of the settings (as ``POST /admin/jobs/bulk/cancel``).
A running job is stopped by the worker that runs it (jobrail.worker.cancel_watch)."""

from __future__ import annotations

import argparse
import json
import sys
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING

# Nothing of jobrail is imported here (see jobrail.cli).
if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine

    from jobrail.jobs.workflows import Workflows
    from jobrail.modules import Module
    from jobrail.outbox.uow import SqlaUnitOfWork
    from jobrail.settings import Settings

CANCEL_HELP = (
    "cancel a job, or every job a filter takes",
    """\
Cancel one job by its id, or, with filters instead, every job they take (of every
tenant unless --tenant says one): a job that has not started is cancelled at once; a
running one is stopped by its worker within about a second, its cleanup run. The bulk
cancel goes 500 jobs a transaction until no job is left. Prints one line, or with
--json {"job_id", "status", "cancel_requested"} or {"cancelled", "stopping"}.

examples:
  jobrail jobs cancel 0190f5d2-7a4c-7c6e-9d35-1b2c3d4e5f60
  jobrail jobs cancel --type reports.render --status pending --status retrying
  jobrail jobs cancel --tenant acme --before 2026-12-01T00:00:00Z --json""",
)

STATUSES = ("pending", "retrying", "blocked", "running")


def add_cancel_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``jobrail jobs cancel`` (the parser: jobrail.cli.parser)."""
    parser.add_argument("job_id", nargs="?", type=uuid.UUID, help="the job's id (or filters)")
    parser.add_argument("--type", help="jobs of this type")
    parser.add_argument(
        "--status", action="append", choices=STATUSES, help="jobs in this status (repeatable)"
    )
    parser.add_argument("--tenant", help="this tenant's jobs only")
    parser.add_argument("--entity", help="jobs enqueued for this entity id")
    parser.add_argument(
        "--before", type=_instant, help="jobs made before this ISO 8601 time (UTC unless it says)"
    )
    parser.add_argument("--json", action="store_true", help="print JSON")


def _instant(text: str) -> datetime:
    try:
        at = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an ISO 8601 time") from None
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)


async def _cancel_command(
    settings: Settings, args: argparse.Namespace, modules: Sequence[Module]
) -> str:
    from jobrail.kernel.errors import DomainError
    from jobrail.store.engine import close_engine, create_engine

    filtered = any(
        value is not None
        for value in (args.type, args.status, args.tenant, args.entity, args.before)
    )
    if (args.job_id is None) == (not filtered):
        print(
            "jobrail: give a job id or filters (--type, --status, ...), not both", file=sys.stderr
        )
        raise SystemExit(2)
    engine = create_engine(settings.database)
    try:
        if args.job_id is not None:
            return await _cancel_one(engine, settings, modules, args)
        return await _cancel_many(engine, settings, modules, args)
    except DomainError as exc:
        print(f"jobrail: {exc}", file=sys.stderr)
        raise SystemExit(1) from None
    finally:
        await close_engine(engine)


def _units(
    engine: AsyncEngine, settings: Settings, modules: Sequence[Module]
) -> tuple[SqlaUnitOfWork, Workflows]:
    """A unit of work on `engine`; messages it adds wait in the outbox for the relay."""
    from jobrail.kernel.clock import SystemClock
    from jobrail.outbox.uow import SqlaUnitOfWork, UnitOfWorkFactory
    from jobrail.runtime.bootstrap import job_catalog
    from jobrail.store.engine import create_sessionmaker

    class _Relayed:  # the outbox relay sends them (no broker here)
        async def dispatch(self, messages: Sequence[object]) -> None:
            return None

        async def dispatch_each(self, commits: Sequence[Sequence[object]]) -> None:
            return None

    _, registry, events = job_catalog(settings, modules)
    factory = UnitOfWorkFactory(
        create_sessionmaker(engine),
        _Relayed(),
        SystemClock(),
        events,
        registry,
        settings.retry.max_attempts,
    )
    return factory(SqlaUnitOfWork), factory.workflows


async def _cancel_one(
    engine: AsyncEngine, settings: Settings, modules: Sequence[Module], args: argparse.Namespace
) -> str:
    from jobrail.jobs.cancel import CancelJob, CancelJobCommand
    from jobrail.kernel.clock import SystemClock
    from jobrail.kernel.ids import JobId

    uow, workflows = _units(engine, settings, modules)
    job = await CancelJob(uow, SystemClock(), workflows)(
        CancelJobCommand(tenant_id=None, job_id=JobId(args.job_id))
    )
    answer = {
        "job_id": str(job.id),
        "status": job.status.value,
        "cancel_requested": job.cancel_requested,
    }
    if args.json:
        return json.dumps(answer)
    if job.status.value == "cancelled":
        return f"job {job.id}: cancelled"
    return f"job {job.id}: running, asked to stop"


async def _cancel_many(
    engine: AsyncEngine, settings: Settings, modules: Sequence[Module], args: argparse.Namespace
) -> str:
    from jobrail.jobs.cancel import CANCELLABLE, CancelJobs, CancelJobsCommand
    from jobrail.jobs.domain import JobStatus
    from jobrail.kernel.clock import SystemClock
    from jobrail.kernel.ids import TenantId

    uow, workflows = _units(engine, settings, modules)
    cancel = CancelJobs(uow, SystemClock(), workflows)
    command = CancelJobsCommand(
        tenant_id=TenantId(args.tenant) if args.tenant is not None else None,
        statuses=frozenset(map(JobStatus, args.status)) if args.status else CANCELLABLE,
        type=args.type,
        entity_id=args.entity,
        created_before=args.before,
    )
    cancelled = stopping = 0
    more = True
    while more:
        done = await cancel(command)
        cancelled, stopping, more = cancelled + done.cancelled, stopping + done.stopping, done.more
    if args.json:
        return json.dumps({"cancelled": cancelled, "stopping": stopping})
    return f"cancelled {cancelled} jobs; asked {stopping} running jobs to stop"
