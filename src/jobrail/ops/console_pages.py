"""The console's workers, schedules and limits pages.

- ``/ops/workers``: every process that runs jobs, from its beats (jobrail.workers_seen),
  with the jobs it runs; refreshes itself.
- ``/ops/schedules``: every schedule with its next and last fire, and the scheduler
  process that leads (jobrail.ops.schedules); refreshes itself.
- ``/ops/limits``: the limits the job types declare; for one limit and key, what
  acquiring it would decide now (peek), who holds it (the jobs behind its lock or
  slots), and its reset: a confirmed action, as every action of the console is
  (jobrail.ops.console_actions), through the admin API's use case (``LimitsAdmin``).
"""

import logging
from typing import Annotated
from urllib.parse import urlencode

from dishka.integrations.fastapi import FromDishka
from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from jobrail.jobs.registry import JobRegistry
from jobrail.kernel.errors import InvalidInputError, NotFoundError
from jobrail.limits.model import LimitsUnavailableError
from jobrail.ops.console import OpsAdmin, OpsRoute, action_form, is_htmx, secured
from jobrail.ops.limit_catalog import Holder, declared_limits, kind_name
from jobrail.ops.limits import LimitsAdmin
from jobrail.ops.page_parts import ops_path
from jobrail.ops.pages import message_page, refused_page
from jobrail.ops.rendering import render
from jobrail.ops.schedules import ListSchedules
from jobrail.workers_seen.model import STATES
from jobrail.workers_seen.use_cases import ListWorkers

log = logging.getLogger("jobrail.ops")

router = APIRouter(prefix="/ops", route_class=OpsRoute, include_in_schema=False)

Text = Annotated[str, Query(max_length=1000)]
MAX_KEY = 255  # as the admin API's limit routes take it
MAX_NAME = 200


def _page(html: str, status: int = 200) -> Response:
    return secured(HTMLResponse(html, status_code=status))


def _problem(message: str, status: int, back: str) -> Response:
    page = message_page(message, element_id="problem", back=back, back_text="back")
    return _page(page, status)


@router.get("/workers", response_class=HTMLResponse)
async def workers_page(
    request: Request, admin: OpsAdmin, workers: FromDishka[ListWorkers]
) -> Response:
    seen = await workers()
    counts = {state: sum(1 for w in seen if w.state == state) for state in STATES}
    html = render(
        "workers.html", live_only=is_htmx(request), csrf=admin.csrf, workers=seen, counts=counts
    )
    return _page(html)


@router.get("/schedules", response_class=HTMLResponse)
async def schedules_page(
    request: Request, admin: OpsAdmin, schedules: FromDishka[ListSchedules]
) -> Response:
    view = await schedules()
    html = render("schedules.html", live_only=is_htmx(request), csrf=admin.csrf, view=view)
    return _page(html)


def _checked(registry: JobRegistry, job_type: str, limit: str, key: str) -> None:
    """Refuse a limit no job type declares, or a key that cannot be one (InvalidInputError,
    NotFoundError), before the backend is asked anything."""
    if not (job_type and limit and key):
        raise InvalidInputError("give a job type, one of its limits and a key")
    if len(job_type) > MAX_NAME or len(limit) > MAX_NAME or len(key) > MAX_KEY:
        raise InvalidInputError(
            f"a job type or limit name has at most {MAX_NAME} characters, a key {MAX_KEY}"
        )
    spec = registry.spec(job_type)
    if spec is None:
        raise NotFoundError(f"job type {job_type!r} not found")
    names = [declared.name for declared in spec.limits.all()]
    if limit not in names:
        have = ", ".join(sorted(names)) or "none"
        raise NotFoundError(f"job type {job_type!r} has no limit {limit!r} (it has: {have})")


def _status(exc: Exception) -> int:
    return 404 if isinstance(exc, NotFoundError) else 400


@router.get("/limits", response_class=HTMLResponse)
async def limits_page(
    request: Request,
    admin: OpsAdmin,
    registry: FromDishka[JobRegistry],
    limits: FromDishka[LimitsAdmin],
    job_type: Text = "",
    limit: Text = "",
    key: Text = "",
    note: Text = "",
) -> Response:
    chosen = job_type or limit or key
    problem, status, state, holders = "", 200, None, None
    if chosen:
        try:
            _checked(registry, job_type, limit, key)
            state = await limits.peek(job_type, limit, key)
            holders = [Holder.of(h) for h in await limits.holders(job_type, limit, key)]
        except (InvalidInputError, NotFoundError) as exc:
            problem, status = str(exc), _status(exc)
        except LimitsUnavailableError as exc:
            problem, status = f"Redis cannot be asked right now: {exc}", 503
    html = render(
        "limits.html",
        live_only=is_htmx(request),
        csrf=admin.csrf,
        declared=declared_limits(registry),
        chosen={"job_type": job_type, "limit": limit, "key": key},
        state=state,
        kind=kind_name(state.kind) if state else "",
        holders=holders,
        problem=problem,
        note="Reset: the limit starts afresh for this key." if note == "reset" else "",
    )
    return _page(html, status)


@router.post("/limits/reset")
async def reset_limit(
    request: Request,
    admin: OpsAdmin,
    registry: FromDishka[JobRegistry],
    limits: FromDishka[LimitsAdmin],
) -> Response:
    back = ops_path("/limits")
    form = await action_form(request, admin)
    if form is None:
        return _page(refused_page(), 403)
    job_type, limit, key = form.get("job_type", ""), form.get("limit", ""), form.get("key", "")
    try:
        _checked(registry, job_type, limit, key)
    except (InvalidInputError, NotFoundError) as exc:
        return _problem(str(exc), _status(exc), back)
    chosen = urlencode({"job_type": job_type, "limit": limit, "key": key})
    if form.get("confirm") != "yes":
        question = (
            f"Reset limit {limit} of {job_type} for key {key}? Its lock is freed, its slots "
            "emptied or its rate starts afresh: jobs that hold it may overlap the next."
        )
        fields = {"job_type": job_type, "limit": limit, "key": key}
        html = render(
            "confirm.html",
            question=question,
            path="/limits/reset",
            fields=fields,
            back=f"{back}?{chosen}",
            csrf=admin.csrf,
        )
        return _page(html)
    try:
        await limits.reset(job_type, limit, key)
    except LimitsUnavailableError as exc:
        return _problem(f"Redis cannot be asked right now: {exc}", 503, back)
    log.info(
        "ops console: key %s: reset limit %s of %s for key %s", admin.who, limit, job_type, key
    )
    return secured(RedirectResponse(f"{back}?{chosen}&note=reset", status_code=303))
