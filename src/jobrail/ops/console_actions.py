"""The console's lists and actions: the job list, a job's redrive and cancel, the
dead-letter queue with its redrive and purge, and the queues with their pauses.

Every action is a POST with the session's CSRF token (jobrail.ops.console.action_form)
and is confirmed: a POST without ``confirm=yes`` changes nothing and answers a page that
asks, whose form posts it again with it. What an action does is the admin API's use case
(the same rules, the same errors); each one done is logged with the admin's key id."""

import logging
import uuid
from typing import Annotated

from dishka.integrations.fastapi import FromDishka
from fastapi import APIRouter, Query, Request, Response
from fastapi.responses import HTMLResponse, RedirectResponse

from jobrail.dispatch.pauses import Pauses
from jobrail.jobs.cancel import CancelJob, CancelJobCommand
from jobrail.jobs.domain import JobStatus
from jobrail.jobs.operator_reads import QueueStats
from jobrail.jobs.ports import JobsUnitOfWork
from jobrail.kernel.errors import (
    BrokerUnavailableError,
    ConflictError,
    InvalidInputError,
    NotFoundError,
)
from jobrail.kernel.ids import JobId
from jobrail.ops.console import OpsAdmin, OpsRoute, action_form, is_htmx, secured
from jobrail.ops.dead_letters import (
    ListDeadLetters,
    PurgeDeadLetters,
    PurgeDeadLettersCommand,
    RedriveDeadLetters,
    RedriveDeadLettersCommand,
)
from jobrail.ops.job_search import SearchJobs, SearchJobsQuery
from jobrail.ops.page_parts import ops_path
from jobrail.ops.pages import message_page, not_found_page, refused_page
from jobrail.ops.redrive import RedriveJob, RedriveJobCommand
from jobrail.ops.rendering import render

log = logging.getLogger("jobrail.ops")

router = APIRouter(prefix="/ops", route_class=OpsRoute, include_in_schema=False)

Text = Annotated[str, Query(max_length=1000)]
DLQ_SHOWN = 100


def _page(html: str, status: int = 200) -> Response:
    return secured(HTMLResponse(html, status_code=status))


def _done(admin_who: str, what: str, where: str) -> Response:
    log.info("ops console: key %s: %s", admin_who, what)
    return secured(RedirectResponse(where, status_code=303))


def _confirm(question: str, path: str, form: dict[str, str], back: str, csrf: str | None) -> str:
    fields = {k: v for k, v in form.items() if k not in ("csrf_token", "confirm")}
    return render("confirm.html", question=question, path=path, fields=fields, back=back, csrf=csrf)


def _problem(exc: Exception, back: str) -> Response:
    status = {NotFoundError: 404, ConflictError: 409, InvalidInputError: 400}
    code = next((c for t, c in status.items() if isinstance(exc, t)), 503)
    return _page(message_page(str(exc), element_id="problem", back=back, back_text="back"), code)


@router.get("/jobs", response_class=HTMLResponse)
async def jobs_page(
    request: Request,
    admin: OpsAdmin,
    search: FromDishka[SearchJobs],
    status: Text = "",
    type: Text = "",
    tenant: Text = "",
    queue: Text = "",
    created_from: Text = "",
    created_to: Text = "",
    q: Text = "",
    cursor: Text = "",
    entity: Text = "",
) -> Response:
    query = SearchJobsQuery(
        status, type, tenant, queue, created_from, created_to, q, cursor, entity=entity
    )
    problem, page = "", None
    try:
        page = await search(query)
    except InvalidInputError as exc:
        problem = str(exc)
    html = render(
        "jobs.html",
        live_only=is_htmx(request),
        csrf=admin.csrf,
        query=query,
        statuses=[s.value for s in JobStatus],
        page=page,
        problem=problem,
        filters={k: v for k, v in request.query_params.items() if k != "cursor" and v},
    )
    return _page(html, 400 if problem else 200)


@router.post("/jobs/{job_id}/redrive")
async def redrive_job(
    request: Request, job_id: str, admin: OpsAdmin, redrive: FromDishka[RedriveJob]
) -> Response:
    back = ops_path(f"/jobs/{job_id}")
    form = await action_form(request, admin)
    if form is None:
        return _page(refused_page(), 403)
    try:
        target = JobId(uuid.UUID(job_id))
    except ValueError:
        return _page(not_found_page("job"), 404)
    if form.get("confirm") != "yes":
        question = f"Redrive job {target}? It runs again, its attempts reset."
        return _page(_confirm(question, f"/jobs/{job_id}/redrive", form, back, admin.csrf))
    try:
        await redrive(RedriveJobCommand(tenant_id=None, job_id=target))
    except (NotFoundError, ConflictError, BrokerUnavailableError) as exc:
        return _problem(exc, back)
    return _done(admin.who, f"redrove job {target}", f"{back}?note=redriven")


@router.post("/jobs/{job_id}/cancel")
async def cancel_job(
    request: Request,
    job_id: str,
    admin: OpsAdmin,
    uow: FromDishka[JobsUnitOfWork],
    cancel: FromDishka[CancelJob],
) -> Response:
    back = ops_path(f"/jobs/{job_id}")
    form = await action_form(request, admin)
    if form is None:
        return _page(refused_page(), 403)
    try:
        target = JobId(uuid.UUID(job_id))
    except ValueError:
        return _page(not_found_page("job"), 404)
    async with uow:
        job = await uow.jobs.get(target)
    if job is None:
        return _page(not_found_page("job"), 404)
    if form.get("confirm") != "yes":
        question = f"Cancel job {target} ({job.type}, {job.status.value})?"
        return _page(_confirm(question, f"/jobs/{job_id}/cancel", form, back, admin.csrf))
    try:
        done = await cancel(CancelJobCommand(tenant_id=job.tenant_id, job_id=target))
    except (NotFoundError, ConflictError) as exc:
        return _problem(exc, back)
    note = "cancelled" if done.status is JobStatus.CANCELLED else "cancel-requested"
    return _done(admin.who, f"cancelled job {target}", f"{back}?note={note}")


@router.get("/dlq", response_class=HTMLResponse)
async def dlq_page(
    admin: OpsAdmin, letters: FromDishka[ListDeadLetters], note: Text = "", n: Text = ""
) -> Response:
    try:
        shown, problem = await letters(DLQ_SHOWN), ""
    except BrokerUnavailableError as exc:
        shown, problem = [], f"RabbitMQ cannot be asked right now: {exc}"
    count = n if n.isascii() and n.isdigit() else "?"
    notes = {"redriven": f"{count} redriven.", "purged": f"{count} purged."}
    html = render(
        "dlq.html",
        csrf=admin.csrf,
        letters=shown,
        limit=DLQ_SHOWN,
        problem=problem,
        note=notes.get(note, ""),
    )
    return _page(html)


@router.post("/dlq/redrive")
async def redrive_dead_letters(
    request: Request, admin: OpsAdmin, redrive: FromDishka[RedriveDeadLetters]
) -> Response:
    back = ops_path("/dlq")
    form = await action_form(request, admin)
    if form is None:
        return _page(refused_page(), 403)
    letter = form.get("id", "")
    every = form.get("all") == "yes"
    if every == bool(letter) or len(letter) > 100:
        return _problem(InvalidInputError("redrive one dead letter, or all"), back)
    if form.get("confirm") != "yes":
        question = (
            "Redrive every dead letter whose job failed?"
            if every
            else f"Redrive dead letter {letter}? Its job runs again."
        )
        return _page(_confirm(question, "/dlq/redrive", form, back, admin.csrf))
    try:
        outcomes = await redrive(
            RedriveDeadLettersCommand(ids=None if every else frozenset({letter}))
        )
    except BrokerUnavailableError as exc:
        return _problem(exc, back)
    redriven = sum(1 for o in outcomes if o.outcome == "redriven")
    what = "all" if every else letter
    return _done(
        admin.who,
        f"redrove dead letters ({what}): {redriven}",
        f"{back}?note=redriven&n={redriven}",
    )


@router.post("/dlq/purge")
async def purge_dead_letters(
    request: Request, admin: OpsAdmin, purge: FromDishka[PurgeDeadLetters]
) -> Response:
    back = ops_path("/dlq")
    form = await action_form(request, admin)
    if form is None:
        return _page(refused_page(), 403)
    every = form.get("all") == "yes"
    try:
        job_id = JobId(uuid.UUID(form["job_id"])) if form.get("job_id") else None
    except ValueError:
        return _problem(InvalidInputError("job_id is a job's id"), back)
    if every == (job_id is not None):
        return _problem(InvalidInputError("purge one job's dead letters, or all"), back)
    if form.get("confirm") != "yes":
        question = (
            "Purge every dead letter? They are deleted for good; their jobs stay failed."
            if every
            else f"Purge the dead letters of job {job_id}? They are deleted for good."
        )
        return _page(_confirm(question, "/dlq/purge", form, back, admin.csrf))
    try:
        purged = await purge(PurgeDeadLettersCommand(all=every, job_id=job_id))
    except BrokerUnavailableError as exc:
        return _problem(exc, back)
    what = "all" if every else f"job {job_id}"
    return _done(
        admin.who,
        f"purged dead letters ({what}): {purged.purged}",
        f"{back}?note=purged&n={purged.purged}",
    )


@router.get("/queues", response_class=HTMLResponse)
async def queues_page(
    request: Request,
    admin: OpsAdmin,
    stats: FromDishka[QueueStats],
    pauses: FromDishka[Pauses],
    note: Text = "",
) -> Response:
    try:
        depths, problem = await stats.queue_depths(), ""
    except BrokerUnavailableError as exc:
        depths, problem = [], f"RabbitMQ cannot be asked right now: {exc}"
    paused = await pauses.list()
    queue_paused = {p.value: p for p in paused if p.scope == "queue"}
    notes = {"paused": "Paused.", "resumed": "Resumed."}
    html = render(
        "queues.html",
        live_only=is_htmx(request),
        csrf=admin.csrf,
        depths=depths,
        paused=paused,
        queue_paused=queue_paused,
        problem=problem,
        note=notes.get(note, ""),
    )
    return _page(html)


@router.post("/queues/{action}")
async def pause_or_resume(
    request: Request, action: str, admin: OpsAdmin, pauses: FromDishka[Pauses]
) -> Response:
    back = ops_path("/queues")
    if action not in ("pause", "resume"):
        return _page(not_found_page("action"), 404)
    form = await action_form(request, admin)
    if form is None:
        return _page(refused_page(), 403)
    scope, value = form.get("scope", ""), form.get("value", "")
    if form.get("confirm") != "yes":
        question = f"{action.capitalize()} {scope} {value}?"
        if action == "pause":
            question += " None of its jobs starts until it is resumed; running jobs finish."
        return _page(_confirm(question, f"/queues/{action}", form, back, admin.csrf))
    try:
        if action == "pause":
            await pauses.pause(scope, value)
        else:
            await pauses.resume(scope, value)
    except (InvalidInputError, NotFoundError) as exc:
        return _problem(exc, back)
    done = "paused" if action == "pause" else "resumed"
    return _done(admin.who, f"{done} {scope} {value}", f"{back}?note={done}")
