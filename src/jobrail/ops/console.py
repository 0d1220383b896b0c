"""The ops page: job counts by status and type, queue and DLQ depths, outbox lag, recent
failures, recent batches and chains, and webhooks with their deliveries, with a page for
each batch or chain and each job (with its events); rendered on the server
(jobrail.ops.pages) and refreshing itself. No front-end build. Every page asks for
the same sign-in (`OpsAdmin`) before it reads anything.

Signing in. A browser cannot send a Bearer header, so the page signs in with a form: an
admin key given once starts a session kept on the server (``ops_sessions``, see
jobrail.ops.sessions). The browser holds only a random session token, in an
HttpOnly, SameSite=Strict cookie scoped to ``/ops``; the table holds the token's SHA-256
digest, so neither it nor ``api_keys`` holds anything a browser could present. Every
page view looks the session up together with its key (one query, no cache): signing out
deletes the row, and revoking the key or its tenant's admin flag ends the session on the
next request, on every API replica. A session ends ``JOBRAIL_OPS__SESSION_TTL_S`` (8 h)
after it began, whatever the browser keeps. A Bearer admin key works too, for curl.

Cross-site requests. Every form carries a CSRF token: the sign-in form the value of a
short-lived cookie set with the form (double submit: a page of another site can neither
read nor set it, and SameSite=Strict keeps it off cross-site requests), the sign-out form
and every action's (jobrail.ops.console_actions) an HMAC of the session token (never
stored). A POST whose browser says it came from another site (``Sec-Fetch-Site``) is
refused before anything else. Responses carry a Content-Security-Policy that allows
nothing but the console's own stylesheet and script (``/ops/static``: its stylesheet and
htmx), requests and forms to this origin, refuse framing, and are never cached.

Refreshing. A page whose content changes (the overview, a job or a flow not finished)
asks htmx to fetch it again every few seconds; asked by htmx (``HX-Request``), a page
answers with its ``live`` part alone, which replaces the one shown. A request by htmx
whose session has ended is answered with ``HX-Redirect`` to the sign-in page, which
htmx then loads as a whole page (rather than swapping it into the page shown).
"""

import hashlib
import hmac
import math
import re
import secrets
import uuid
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import parse_qs

from dishka.integrations.fastapi import DishkaRoute, FromDishka, inject
from fastapi import APIRouter, Cookie, Depends, Request, Response
from fastapi.responses import HTMLResponse, RedirectResponse
from fastapi.staticfiles import StaticFiles
from sqlalchemy.ext.asyncio import AsyncEngine

from jobrail.http.auth import principal_for_key
from jobrail.jobs.get import GetJob
from jobrail.jobs.waiting_out import PausedByOut, WaitingOut
from jobrail.kernel.clock import Clock
from jobrail.kernel.errors import NotFoundError
from jobrail.kernel.ids import JobId
from jobrail.ops.overview_data import GetOverviewData
from jobrail.ops.page_parts import CONTENT_SECURITY_POLICY, mounted_at, ops_path
from jobrail.ops.pages import (
    flow_page,
    job_page,
    login_page,
    not_found_page,
    overview_page,
    refused_page,
)
from jobrail.ops.sessions import SqlaOpsSessions
from jobrail.ops.views import GetOpsFlow, GetOpsJob
from jobrail.settings import Settings
from jobrail.tenants.domain import Principal

COOKIE = "jobrail_ops"
LOGIN_COOKIE = "jobrail_ops_login"
LOGIN_COOKIE_MAX_AGE_S = 3600  # how long a sign-in form stays usable
MAX_FORM_BYTES = 1024
# What secrets.token_urlsafe(32) makes; anything else in a cookie is not ours.
TOKEN = re.compile(r"^[A-Za-z0-9_-]{43}$")
# Fetch Metadata: what a browser says about where a request came from. Absent from
# non-browser clients and old browsers, which the CSRF tokens still cover.
SAME_ORIGIN = {"same-origin", "none"}
STATIC = Path(__file__).parent / "static"
# What an action's redirect may say on the page it lands on (never a client's text).
NOTES = {
    "redriven": "Redriven: the job runs again.",
    "cancelled": "Cancelled.",
    "cancel-requested": "Cancel requested: the running attempt is asked to stop.",
}


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def _csrf_for(session_token: str) -> str:
    """The sign-out form's token: derived from the session token, so nothing is stored,
    and not derivable from the stored digest."""
    return hmac.new(session_token.encode(), b"jobrail-ops-csrf", hashlib.sha256).hexdigest()


def _token(value: str | None) -> str | None:
    return value if value is not None and TOKEN.match(value) else None


def _form(body: bytes) -> dict[str, str]:
    fields = parse_qs(body.decode("utf-8", "replace"))
    return {name: values[0].strip() for name, values in fields.items() if values}


def _cross_site(request: Request) -> bool:
    site = request.headers.get("sec-fetch-site")
    return site is not None and site not in SAME_ORIGIN


async def _session_principal(
    engine: AsyncEngine, clock: Clock, session_token: str | None
) -> Principal | None:
    if session_token is None:
        return None
    return await SqlaOpsSessions(engine).principal_for(_digest(session_token), clock.now())


@dataclass(frozen=True, slots=True)
class _Admin:
    csrf: str | None
    """The forms' token; None for a Bearer key (a curl has no session, and a browser
    cannot send another site's Bearer header, so its POSTs need none)."""
    who: str
    """The admin's API key id, for the log of what it did."""


class _SignInFirst(Exception):  # noqa: N818 - an answer, not an error
    """What a page answers instead when the request is not an admin's: the sign-in page."""

    def __init__(self, response: Response) -> None:
        super().__init__("sign in first")
        self.response = response


class OpsRoute(DishkaRoute):
    """A console route: a page whose sign-in (`OpsAdmin`) turned the request away answers
    with the sign-in page."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def answer(request: Request) -> Response:
            # Links, forms, redirects and cookies under the app's mount point.
            with mounted_at(request.scope.get("root_path", "")):
                try:
                    return await handler(request)
                except _SignInFirst as exc:
                    return exc.response

        return answer


@inject
async def _signed_in(
    request: Request,
    engine: FromDishka[AsyncEngine],
    clock: FromDishka[Clock],
    jobrail_ops: Annotated[str | None, Cookie()] = None,
    jobrail_ops_login: Annotated[str | None, Cookie()] = None,
) -> _Admin:
    """The admin a page is for (by its session, or a Bearer admin key); else the page
    answers with the sign-in page. Every page of the console takes this first."""
    header = request.headers.get("authorization", "")
    session_token = _token(jobrail_ops)
    if header.lower().startswith("bearer "):
        principal = await principal_for_key(request, header[7:].strip())
        session_token = None
    else:
        principal = await _session_principal(engine, clock, session_token)
    if principal is None:
        response = _login(request, jobrail_ops_login, status=401)
        if is_htmx(request):
            # A refresh or a swap by htmx would put the sign-in page inside the page:
            # htmx goes to it instead, as a whole page.
            response = secured(Response(status_code=401))
            response.headers["HX-Redirect"] = ops_path()
        if jobrail_ops is not None:
            response.delete_cookie(COOKIE, path=ops_path())  # ended, expired or never ours
        raise _SignInFirst(response)
    if not principal.admin:
        raise _SignInFirst(
            _login(request, jobrail_ops_login, "That key is not an admin key.", status=403)
        )
    return _Admin(_csrf_for(session_token) if session_token else None, str(principal.key_id))


OpsAdmin = Annotated[_Admin, Depends(_signed_in)]

router = APIRouter(prefix="/ops", route_class=OpsRoute, include_in_schema=False)
# The stylesheet and htmx: no secret, so no sign-in (the sign-in page uses them too).
router.mount("/ops/static", StaticFiles(directory=STATIC), name="ops-static")


def is_htmx(request: Request) -> bool:
    return request.headers.get("hx-request") == "true"


async def action_form(request: Request, admin: _Admin) -> dict[str, str] | None:
    """The fields an action's form posted; None when the POST is refused: one the browser
    says came from another site, or a session's without the session's CSRF token."""
    if _cross_site(request):
        return None
    body = await request.body()
    if len(body) > MAX_FORM_BYTES:
        return None
    form = _form(body)
    given = form.get("csrf_token", "")
    if admin.csrf is not None and not hmac.compare_digest(admin.csrf.encode(), given.encode()):
        return None
    return form


@router.get("", response_class=HTMLResponse)
async def ops_page(
    request: Request, admin: OpsAdmin, overview: FromDishka[GetOverviewData]
) -> Response:
    data = await overview()
    page = overview_page(
        data.overview, data.flows, data.webhooks, admin.csrf, live_only=is_htmx(request)
    )
    return secured(HTMLResponse(page))


@router.get("/flows/{flow_id}", response_class=HTMLResponse)
async def ops_flow_page(
    request: Request, flow_id: str, admin: OpsAdmin, flow: FromDishka[GetOpsFlow]
) -> Response:
    try:
        found = await flow(uuid.UUID(flow_id))
    except (ValueError, NotFoundError):
        return secured(HTMLResponse(not_found_page("batch or chain"), status_code=404))
    return secured(HTMLResponse(flow_page(found, admin.csrf, live_only=is_htmx(request))))


@router.get("/jobs/{job_id}", response_class=HTMLResponse)
async def ops_job_page(
    request: Request,
    job_id: str,
    admin: OpsAdmin,
    job: FromDishka[GetOpsJob],
    get_job: FromDishka[GetJob],
    note: str = "",
) -> Response:
    try:
        found = await job(JobId(uuid.UUID(job_id)))
    except (ValueError, NotFoundError):
        return secured(HTMLResponse(not_found_page("job"), status_code=404))
    standing = await get_job.standing_of(found.job)
    waiting: dict[str, Any] | None = None
    if standing is not None:  # what GET /jobs/{id} says of it, as JSON
        paused = PausedByOut.of(standing.pause)
        waiting = {
            "waiting": WaitingOut.of(standing).model_dump(mode="json"),
            "paused": None if paused is None else paused.model_dump(mode="json"),
        }
    page = job_page(
        found,
        admin.csrf,
        waiting=waiting,
        note=NOTES.get(note, ""),
        live_only=is_htmx(request),
    )
    return secured(HTMLResponse(page))


@router.post("/login")
async def login(
    request: Request,
    engine: FromDishka[AsyncEngine],
    clock: FromDishka[Clock],
    settings: FromDishka[Settings],
    jobrail_ops_login: Annotated[str | None, Cookie()] = None,
) -> Response:
    if _cross_site(request):
        return _login(request, None, "Sign in from this page, not another site.", status=403)
    body = await request.body()
    if len(body) > MAX_FORM_BYTES:
        return _login(request, jobrail_ops_login, "That is not an API key.", status=400)
    form = _form(body)
    expected = _token(jobrail_ops_login)
    given = form.get("csrf_token", "")
    if expected is None or not hmac.compare_digest(expected.encode(), given.encode()):
        # A form from another site, or one older than its cookie: a fresh form.
        return _login(request, None, "The sign-in form expired: try again.", status=403)
    key = form.get("api_key", "")
    # Throttled per client like every key lookup (jobrail.http.auth).
    principal = await principal_for_key(request, key) if key else None
    if principal is None or not principal.admin:
        return _login(request, expected, "That is not an admin API key.", status=401)
    session_token = secrets.token_urlsafe(32)
    now = clock.now()
    ttl = settings.ops.session_ttl_s
    await SqlaOpsSessions(engine).start(
        _digest(session_token), principal.key_id, now, now + timedelta(seconds=ttl)
    )
    response = RedirectResponse(ops_path(), status_code=303)
    response.set_cookie(
        COOKIE,
        session_token,
        max_age=math.ceil(ttl),  # the browser may keep it longer; the server will not
        path=ops_path(),
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )
    response.delete_cookie(LOGIN_COOKIE, path=ops_path())
    return secured(response)


@router.post("/logout")
async def logout(
    request: Request,
    engine: FromDishka[AsyncEngine],
    jobrail_ops: Annotated[str | None, Cookie()] = None,
) -> Response:
    session_token = _token(jobrail_ops)
    if session_token is not None:
        if _cross_site(request):
            return secured(HTMLResponse(refused_page(), status_code=403))
        body = await request.body()
        given = _form(body).get("csrf_token", "") if len(body) <= MAX_FORM_BYTES else ""
        if not hmac.compare_digest(_csrf_for(session_token).encode(), given.encode()):
            return secured(HTMLResponse(refused_page(), status_code=403))
        await SqlaOpsSessions(engine).end(_digest(session_token))
    response = RedirectResponse(ops_path(), status_code=303)
    response.delete_cookie(COOKIE, path=ops_path())
    return secured(response)


def _login(
    request: Request, login_token: str | None, problem: str = "", *, status: int
) -> Response:
    """The sign-in page, with its CSRF token: the one the browser holds if it is still
    good (two tabs keep working), else a fresh one set as a cookie."""
    token = _token(login_token) or secrets.token_urlsafe(32)
    response = HTMLResponse(login_page(token, problem), status_code=status)
    response.set_cookie(
        LOGIN_COOKIE,
        token,
        max_age=LOGIN_COOKIE_MAX_AGE_S,
        path=ops_path(),
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )
    return secured(response)


def secured(response: Response) -> Response:
    """Headers every /ops page carries: nothing but the console's own stylesheet and
    script, requests and forms to this origin may run or load, no site may frame it, and
    nobody caches it."""
    response.headers["Content-Security-Policy"] = CONTENT_SECURITY_POLICY
    response.headers["X-Frame-Options"] = "DENY"
    response.headers["Cache-Control"] = "no-store"
    response.headers["X-Content-Type-Options"] = "nosniff"
    response.headers["Referrer-Policy"] = "no-referrer"
    return response
