"""``jobrail jobs``, ``jobrail dlq`` and ``jobrail queues``: the admin API's reads and
actions from the command line, through the use cases the API's container provides (so
both answer alike). Each returns its answer as JSON data and as the table a terminal
shows; what the rules refuse is one line."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from jobrail.cli.tables import fields, table

if TYPE_CHECKING:  # imported inside the command, as jobrail.cli.command says why
    from dishka import AsyncContainer

    from jobrail.jobs.domain import Job
    from jobrail.modules import Module
    from jobrail.settings import Settings

JOB_COLUMNS = ("id", "type", "tenant_id", "queue", "status", "attempts", "created_at")
LETTER_COLUMNS = ("id", "job_id", "job_type", "tenant_id", "source_queue", "dead_at", "reason")


class RefusedError(Exception):
    """What the command cannot do here: one line and exit 2."""


def _needs_broker(args: argparse.Namespace) -> bool:
    return args.command in ("dlq", "queues") or getattr(args, "action", None) == "redrive"


async def _operator_command(
    settings: Settings, args: argparse.Namespace, modules: Sequence[Module]
) -> tuple[Any, str]:
    from jobrail.runtime.bootstrap import build_runtime

    needs_broker = _needs_broker(args)
    if needs_broker and settings.embedded:
        # The embedded broker, its DLQ and its queues live in the `jobrail run` process.
        said = " ".join([args.command, *filter(None, [getattr(args, "action", None)])])
        raise RefusedError(
            f"`jobrail {said}` needs the stack's RabbitMQ (JOBRAIL_MODE=stack); in the "
            "embedded mode use the admin API of the `jobrail run` process"
        )
    runtime = build_runtime(settings, worker=False, modules=modules)
    try:
        if needs_broker:
            await runtime.broker.startup()
        async with runtime.container() as request:
            if args.command == "jobs":
                return await _jobs(request, args)
            if args.command == "dlq":
                return await _dlq(request, args)
            return await _queues(request)
    finally:
        if needs_broker:
            await runtime.broker.shutdown()
        await runtime.container.close()


def job_data(job: Job) -> dict[str, Any]:
    from jobrail.jobs.schemas import JobOut

    return {"tenant_id": job.tenant_id, **JobOut.of(job).model_dump(mode="json")}


async def _jobs(request: AsyncContainer, args: argparse.Namespace) -> tuple[Any, str]:
    from jobrail.jobs.domain import JobStatus
    from jobrail.kernel.errors import InvalidInputError
    from jobrail.kernel.ids import JobId, TenantId
    from jobrail.ops.job_search import cursor_text
    from jobrail.ops.redrive import RedriveJob, RedriveJobCommand
    from jobrail.ops.views import GetOpsJob, ListOpsJobs, ListOpsJobsQuery

    if args.action == "list":
        try:
            status = None if args.status is None else JobStatus(args.status)
        except ValueError:
            known = ", ".join(s.value for s in JobStatus)
            raise InvalidInputError(f"no status {args.status!r} (one of: {known})") from None
        query = ListOpsJobsQuery(
            tenant_id=None if args.tenant is None else TenantId(args.tenant),
            status=status,
            type=args.type,
            queue=args.queue,
            limit=args.limit,
            created_before=args.before,
            after=args.after,
        )
        page = await (await request.get(ListOpsJobs))(query)
        items = [job_data(job) for job in page.items]
        more = cursor_text(page.next_cursor) if page.next_cursor else None
        text = table(items, JOB_COLUMNS)
        if more:
            text += f"\n(more: --after {more})"
        return {"items": items, "next_after": more}, text
    if args.action == "show":
        seen = await (await request.get(GetOpsJob))(JobId(args.job_id))
        shown = job_data(seen.job)
        shown["events"] = [
            {"name": line.event.name, "at": line.event.at.isoformat(), "folded": line.folded}
            for line in seen.events
        ]
        story = table(shown["events"], ("at", "name", "folded"))
        return shown, fields({k: v for k, v in shown.items() if k != "events"}) + "\n\n" + story
    done = await (await request.get(RedriveJob))(
        RedriveJobCommand(tenant_id=None, job_id=JobId(args.job_id))
    )
    redriven = {**job_data(done.job), "dead_letters": done.dead_letters.note}
    return redriven, fields(redriven)


async def _dlq(request: AsyncContainer, args: argparse.Namespace) -> tuple[Any, str]:
    from jobrail.kernel.errors import NotFoundError
    from jobrail.ops.dead_letters import (
        ListDeadLetters,
        PurgeDeadLetters,
        PurgeDeadLettersCommand,
        RedriveDeadLetters,
        RedriveDeadLettersCommand,
    )

    if args.action == "list":
        letters = await (await request.get(ListDeadLetters))(args.limit)
        items = [
            {
                "id": d.id,
                "job_id": None if d.job_id is None else str(d.job_id),
                "job_type": d.job_type,
                "tenant_id": d.tenant_id,
                "source_queue": d.source_queue,
                "dead_at": d.dead_at,
                "reason": d.reason,
                "preview": d.preview,
            }
            for d in letters
        ]
        return {"items": items}, table(items, LETTER_COLUMNS)
    if args.action == "redrive":
        outcomes = await (await request.get(RedriveDeadLetters))(
            RedriveDeadLettersCommand(ids=frozenset([args.letter_id]))
        )
        if not outcomes:
            raise NotFoundError(f"no dead letter {args.letter_id!r} (redriven or purged already?)")
        items = [
            {"id": o.id, "job_id": o.job_id, "outcome": o.outcome, "detail": o.detail}
            for o in outcomes
        ]
        return {"items": items}, table(items, ("id", "job_id", "outcome", "detail"))
    if not args.yes:
        raise RefusedError("`jobrail dlq purge` deletes every dead letter: add --yes to do it")
    purged = await (await request.get(PurgeDeadLetters))(PurgeDeadLettersCommand(all=True))
    answer = {"purged": purged.purged, "complete": purged.complete}
    return answer, fields(answer)


async def _queues(request: AsyncContainer) -> tuple[Any, str]:
    from jobrail.jobs.operator_reads import QueueStats

    depths = await (await request.get(QueueStats)).queue_depths()
    items = [{"queue": d.queue, "ready": d.ready, "consumers": d.consumers} for d in depths]
    return {"items": items}, table(items, ("queue", "ready", "consumers"))
