"""The console's bulk actions: cancel, or redrive, every job a filter takes (type,
status, tenant, entity, created before), from the job list's bulk form.

As every console action (jobrail.ops.console_actions): a POST with the session's CSRF
token, confirmed first. The confirm page says how many jobs the filter takes now,
counting no further than COUNT_CAP; the action then runs in bounded batches (the bulk
cancel's `CancelJobs`: 500 per transaction, 5,000 per go; `RedriveJobs`: 500 per go),
its result says whether more are left, and each one done is logged on ``jobrail.ops``
with the admin's key id and the filter."""

import logging
from dataclasses import dataclass
from datetime import datetime
from urllib.parse import urlencode

from dishka.integrations.fastapi import FromDishka
from fastapi import APIRouter, Request, Response
from fastapi.responses import HTMLResponse

from jobrail.jobs.cancel import CANCELLABLE, CancelJobs, CancelJobsCommand, cancel_filter
from jobrail.jobs.domain import JobStatus
from jobrail.jobs.ports import CancelFilter
from jobrail.kernel.errors import InvalidInputError
from jobrail.kernel.ids import TenantId
from jobrail.ops.bulk import BulkJobs, RedriveJobs, RedriveJobsCommand
from jobrail.ops.console import OpsAdmin, OpsRoute, action_form, secured
from jobrail.ops.job_search import MAX_TEXT, SearchJobsQuery, filter_of
from jobrail.ops.page_parts import ops_path
from jobrail.ops.pages import message_page, not_found_page, refused_page
from jobrail.ops.rendering import render

log = logging.getLogger("jobrail.ops")

router = APIRouter(prefix="/ops", route_class=OpsRoute, include_in_schema=False)

COUNT_CAP = 10_000
"""The confirm page counts the jobs a filter takes up to this many ("at least")."""
FIELDS = ("type", "status", "tenant", "entity", "created_before")


@dataclass(frozen=True, slots=True)
class BulkFilter:
    """The bulk form's filter, checked."""

    statuses: frozenset[JobStatus]
    type: str | None
    tenant: str | None
    entity: str | None
    created_before: datetime | None

    def words(self) -> str:
        """The filter as an operator reads it (on the confirm page and in the log)."""
        parts = [f"status {'/'.join(sorted(s.value for s in self.statuses))}"]
        parts += [
            f"{name} {value}"
            for name, value in (
                ("type", self.type),
                ("tenant", self.tenant),
                ("entity", self.entity),
                ("created before", self.created_before and self.created_before.isoformat()),
            )
            if value
        ]
        return ", ".join(parts)


def bulk_filter(form: dict[str, str], action: str) -> BulkFilter:
    """The form's filter for `action`: the job list's checks for status, type, tenant and
    time; a cancel takes pending, retrying, blocked or running jobs (all four when no
    status is given), a redrive failed ones."""
    status = form.get("status", "").strip()
    where = filter_of(
        SearchJobsQuery(
            status=status,
            type=form.get("type", ""),
            tenant=form.get("tenant", ""),
            created_to=form.get("created_before", ""),
        )
    )
    entity = form.get("entity", "").strip()
    if len(entity) > MAX_TEXT or "\x00" in entity:
        raise InvalidInputError(f"entity is at most {MAX_TEXT} characters of text")
    allowed = CANCELLABLE if action == "cancel" else frozenset({JobStatus.FAILED})
    if where.status is not None and where.status not in allowed:
        names = ", ".join(sorted(s.value for s in allowed))
        raise InvalidInputError(f"a bulk {action} takes jobs that are {names}, not {status}")
    statuses = allowed if where.status is None else frozenset({where.status})
    return BulkFilter(statuses, where.type, where.tenant_id, entity or None, where.created_to)


def _page(html: str, status: int = 200) -> Response:
    return secured(HTMLResponse(html, status_code=status))


def _back(form: dict[str, str]) -> str:
    """The job list, filtered as the bulk form was."""
    listed = {
        "type": "type",
        "status": "status",
        "tenant": "tenant",
        "created_to": "created_before",
    }
    shown = {name: form[field] for name, field in listed.items() if form.get(field)}
    return ops_path("/jobs") + (f"?{urlencode(shown)}" if shown else "")


@router.post("/bulk/{action}", response_class=HTMLResponse)
async def bulk_action(
    request: Request,
    action: str,
    admin: OpsAdmin,
    jobs: FromDishka[BulkJobs],
    cancel: FromDishka[CancelJobs],
    redrive: FromDishka[RedriveJobs],
) -> Response:
    if action not in ("cancel", "redrive"):
        return _page(not_found_page("action"), 404)
    form = await action_form(request, admin)
    if form is None:
        return _page(refused_page(), 403)
    back = _back(form)
    try:
        where = bulk_filter(form, action)
        taken = _taken(action, where)
    except InvalidInputError as exc:
        return _page(message_page(str(exc), element_id="problem", back=back, back_text="back"), 400)
    if form.get("confirm") != "yes":
        return await _confirm(action, where, taken, form, jobs, admin.csrf)
    if action == "cancel":
        cancelled = await cancel(_cancel_command(where))
        result = f"{cancelled.cancelled} cancelled, {cancelled.stopping} running asked to stop"
        if cancelled.more:
            result += "; more jobs match: run it again"
    else:
        redriven = await redrive(_redrive_command(where))
        result = f"{redriven.redriven} redriven, {redriven.skipped} skipped"
        if redriven.more:
            result += "; more failed jobs match: run it again"
        if redriven.dead_letters is not None:
            result += f" ({redriven.dead_letters.note})"
    log.info("ops console: key %s: bulk %s of %s: %s", admin.who, action, where.words(), result)
    html = render("bulk_done.html", csrf=admin.csrf, action=action, result=result, back=back)
    return _page(html)


def _taken(action: str, where: BulkFilter) -> CancelFilter:
    """The jobs the action takes, as its use case will take them (and refuse them)."""
    if action == "cancel":
        return cancel_filter(_cancel_command(where))
    return _redrive_command(where).filter()


async def _confirm(
    action: str,
    where: BulkFilter,
    taken: CancelFilter,
    form: dict[str, str],
    jobs: BulkJobs,
    csrf: str | None,
) -> Response:
    count = await jobs.count(taken, COUNT_CAP, cancellable=action == "cancel")
    back = _back(form)
    if count == 0:
        return _page(message_page(f"No job matches {where.words()}", "no-match", back, "back"))
    many = f"at least {COUNT_CAP:,}" if count >= COUNT_CAP else f"{count:,}"
    jobs_ = "job" if count == 1 else "jobs"
    question = f"{action.capitalize()} {many} {jobs_} ({where.words()})?"
    if action == "cancel":
        question += " Waiting jobs are cancelled at once; running ones are asked to stop."
    else:
        question += " They run again, their attempts reset."
    fields = {name: form[name] for name in FIELDS if form.get(name)}
    html = render(
        "confirm.html",
        question=question,
        path=f"/bulk/{action}",
        fields=fields,
        back=back,
        csrf=csrf,
    )
    return _page(html)


def _cancel_command(where: BulkFilter) -> CancelJobsCommand:
    return CancelJobsCommand(
        tenant_id=TenantId(where.tenant) if where.tenant else None,
        statuses=where.statuses,
        type=where.type,
        entity_id=where.entity,
        created_before=where.created_before,
    )


def _redrive_command(where: BulkFilter) -> RedriveJobsCommand:
    return RedriveJobsCommand(
        tenant_id=TenantId(where.tenant) if where.tenant else None,
        type=where.type,
        entity_id=where.entity,
        created_before=where.created_before,
    )
