"""The ops page's HTML, rendered on the server: every value from the database or the
broker goes through html.escape, and the page's one stylesheet is allowed by its hash
(jobrail.ops.console sends CONTENT_SECURITY_POLICY with every response)."""

import base64
import contextlib
import hashlib
import html
import re
from collections import defaultdict
from collections.abc import Iterator
from contextvars import ContextVar
from datetime import datetime

from jobrail.events.feed import JobEvent, StoryLine
from jobrail.jobs.domain import FlowRole, Job, JobProgress, JobStatus, Wait
from jobrail.jobs.flow import Flow, FlowCounts, FlowKind, FlowStatus
from jobrail.jobs.workflows import FlowView
from jobrail.ops.overview import OpsOverview
from jobrail.ops.views import OpsFlow, OpsJob
from jobrail.webhooks.use_cases import WebhooksOverview

REFRESH_S = 5

_STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#1d2330;background:#f6f7f9}
h1{font-size:20px;margin:0 0 4px} h2{font-size:15px;margin:24px 0 8px}
.muted{color:#6b7280} table{border-collapse:collapse;background:#fff}
th,td{border:1px solid #e1e4e8;padding:4px 10px;text-align:right}
th:first-child,td:first-child{text-align:left} td.err{text-align:left;max-width:48em}
.cards{display:flex;gap:12px} .card{background:#fff;border:1px solid #e1e4e8;padding:10px 16px}
.card b{display:block;font-size:22px} .bad{color:#b42318}
form{display:inline} input{font:inherit;padding:4px} table.fields td{text-align:left}
"""
_STYLE_HASH = base64.b64encode(hashlib.sha256(_STYLE.encode()).digest()).decode()
CONTENT_SECURITY_POLICY = (
    f"default-src 'none'; style-src 'sha256-{_STYLE_HASH}'; form-action 'self'; "
    "frame-ancestors 'none'; base-uri 'none'"
)


# The path the API is mounted at (the ASGI root_path, "/jobrail" under a host's
# app.mount("/jobrail", ...)), for the console's links, forms, redirects and cookies:
# set for each request by jobrail.ops.console, read by `ops_path`. A context variable, so
# that every page and helper need not take it as an argument.
_MOUNTED_AT: ContextVar[str] = ContextVar("jobrail_ops_mounted_at", default="")


@contextlib.contextmanager
def mounted_at(root_path: str) -> Iterator[None]:
    root = root_path.rstrip("/")
    if not re.fullmatch(r"[A-Za-z0-9/_.~%-]*", root):
        root = ""  # the app's own configuration, never a client's: no quoting needed
    token = _MOUNTED_AT.set(root)
    try:
        yield
    finally:
        _MOUNTED_AT.reset(token)


def ops_path(path: str = "") -> str:
    """`/ops` + `path` where the console is served (under the app's mount point)."""
    return f"{_MOUNTED_AT.get()}/ops{path}"


def _page(title: str, body: str, refresh: bool = False) -> str:
    meta = f'<meta http-equiv="refresh" content="{REFRESH_S}">' if refresh else ""
    return (
        f'<!doctype html><html lang="en"><head><meta charset="utf-8">{meta}'
        f"<title>{html.escape(title)}</title><style>{_STYLE}</style></head>"
        f"<body>{body}</body></html>"
    )


def login_page(csrf: str, problem: str = "") -> str:
    note = f'<p class="bad">{html.escape(problem)}</p>' if problem else ""
    return _page(
        "jobrail ops - sign in",
        "<h1>jobrail ops</h1><p class=muted>Sign in with an admin API key.</p>"
        f'{note}<form method=post action="{ops_path("/login")}">'
        f'<input type=hidden name=csrf_token value="{html.escape(csrf)}">'
        "<input type=password name=api_key id=api_key autocomplete=off size=50 required> "
        "<button type=submit id=sign-in>Sign in</button></form>",
    )


def refused_page() -> str:
    return _page(
        "jobrail ops",
        "<h1>jobrail ops</h1><p class=bad>That form did not come from this page: "
        f'<a href="{ops_path()}">back to the ops page</a>.</p>',
    )


def overview_page(
    overview: OpsOverview, flows: list[FlowView], webhooks: WebhooksOverview, csrf: str | None
) -> str:
    e = html.escape
    statuses = [status.value for status in JobStatus]
    by_type: dict[str, dict[str, int]] = defaultdict(dict)
    totals: dict[str, int] = defaultdict(int)
    for count in overview.counts:
        by_type[count.type][count.status.value] = count.count
        totals[count.status.value] += count.count
    head = "".join(f"<th>{s}</th>" for s in statuses)
    rows = "".join(
        f"<tr><td>{e(job_type)}</td>"
        + "".join(
            f'<td data-type="{e(job_type)}" data-status="{s}">{counts.get(s, 0)}</td>'
            for s in statuses
        )
        + "</tr>"
        for job_type, counts in sorted(by_type.items())
    )
    total_row = "<tr><th>all types</th>" + "".join(
        f'<th data-type="*" data-status="{s}">{totals.get(s, 0)}</th>' for s in statuses
    )
    if overview.queues is None:
        queues = '<p class="bad" id="queues-unavailable">RabbitMQ cannot be asked right now.</p>'
    else:
        queues = (
            "<table id=queues><tr><th>queue</th><th>ready</th><th>consumers</th></tr>"
            + "".join(
                f'<tr><td>{e(q.queue)}</td><td data-queue="{e(q.queue)}" data-field="ready">'
                f'{q.ready}</td><td data-queue="{e(q.queue)}" data-field="consumers">'
                f"{q.consumers}</td></tr>"
                for q in overview.queues
            )
            + "</table>"
        )
    dlq = next((q.ready for q in overview.queues or [] if q.queue.endswith("dlq")), None)
    lag = overview.outbox_lag.total_seconds()
    failures = "".join(
        f"<tr><td>{_time(job.finished_at)}</td><td>{_job_link(job, job.type)}</td>"
        f"<td>{e(job.tenant_id)}</td><td>{job.attempts}</td>"
        f'<td class=err data-job="{job.id}">{e((job.last_error or "")[:300])}</td></tr>'
        for job in overview.failures
    )
    cards = (
        f'<div class=card>jobs failed<b id="failed-total">{totals.get("failed", 0)}</b></div>'
        f'<div class=card>running<b id="running-total">{totals.get("running", 0)}</b></div>'
        f'<div class=card>DLQ depth<b id="dlq-depth">{"?" if dlq is None else dlq}</b></div>'
        f'<div class=card>outbox lag<b id="outbox-lag" class="{"bad" if lag > 30 else ""}">'
        f"{lag:.1f}s</b></div>"
    )
    return _page(
        "jobrail ops",
        "<h1>jobrail ops</h1>" + _top(csrf, refresh=True) + f"<div class=cards>{cards}</div>"
        f"<h2>Jobs by type and status</h2><table id=jobs><tr><th>type</th>{head}</tr>"
        f"{rows}{total_row}</tr></table>"
        f"<h2>Queues</h2>{queues}"
        "<h2>Recent failures</h2><table id=failures><tr><th>finished</th><th>type</th>"
        f"<th>tenant</th><th>attempts</th><th>error</th></tr>{failures}</table>"
        + _flows_table(flows)
        + _webhooks_tables(webhooks),
        refresh=True,
    )


def not_found_page(what: str) -> str:
    return _page(
        "jobrail ops",
        f"<h1>jobrail ops</h1><p class=bad id=not-found>No {html.escape(what)} with that id: "
        f'<a href="{ops_path()}">back to the ops page</a>.</p>',
    )


def flow_page(found: OpsFlow, csrf: str | None) -> str:
    e = html.escape
    flow, counts = found.view.flow, found.view.counts
    fields = [
        ("id", e(str(flow.id))),
        ("kind", flow.kind.value),
        ("name", e(flow.name or "")),
        ("tenant", e(flow.tenant_id)),
        ("status", _flow_status(flow)),
        ("created", _time(flow.created_at)),
        ("finished", _time(flow.finished_at)),
    ]
    callbacks = "".join(
        f'<tr data-role="{role.value}"><td>{role.value}</td><td>{_job_link(job)}</td>'
        f'<td data-field="status">{job.status.value}</td><td>{job.attempts}</td>'
        f"<td class=err>{e((job.last_error or '')[:300])}</td></tr>"
        for role in (FlowRole.THEN, FlowRole.CATCH, FlowRole.FINALLY)
        if (job := found.callbacks.get(role)) is not None
    )
    members = "".join(
        f'<tr data-job="{job.id}"><td>{"" if job.flow is None else job.flow.step}</td>'
        f"<td>{_job_link(job)}</td><td>{e(job.type)}</td>"
        f'<td data-field="status">{job.status.value}</td><td>{job.attempts}</td>'
        f"<td>{_progress(job.progress)}</td>"
        f"<td class=err>{e((job.last_error or '')[:300])}</td></tr>"
        for job in found.members
    )
    more = (
        f"<p class=muted id=members-shown>The first {len(found.members)} of {counts.total}.</p>"
        if len(found.members) < counts.total
        else ""
    )
    title = _flow_title(flow)
    return _page(
        f"jobrail ops - {title}",
        f"<h1>{e(title)}</h1>"
        + _top(csrf, refresh=not flow.finished, back=True)
        + _fields("flow", fields)
        + "<h2>Counts</h2><table id=flow-counts><tr>"
        + "".join(f"<th>{name}</th>" for name in _COUNTS)
        + "</tr>"
        + _count_cells(counts)
        + "</table><h2>Callbacks</h2>"
        + (
            "<table id=callbacks><tr><th>role</th><th>job</th><th>status</th>"
            f"<th>attempts</th><th>error</th></tr>{callbacks}</table>"
            if callbacks
            else "<p class=muted id=callbacks>None.</p>"
        )
        + f"<h2>{'Steps' if flow.kind is FlowKind.CHAIN else 'Members'}</h2>"
        "<table id=members><tr><th>#</th><th>job</th><th>type</th><th>status</th>"
        f"<th>attempts</th><th>progress</th><th>error</th></tr>{members}</table>{more}",
        refresh=not flow.finished,
    )


def job_page(found: OpsJob, csrf: str | None) -> str:
    e = html.escape
    job, flow = found.job, found.flow
    fields = [
        ("id", e(str(job.id))),
        ("type", e(job.type)),
        ("queue", e(job.queue)),
        ("tenant", e(job.tenant_id)),
        ("status", job.status.value + (" (cancel requested)" if job.cancel_requested else "")),
        ("attempts", f"{job.attempts} of {job.max_attempts}"),
        ("entity", e(job.entity_id or "")),
        ("created", _time(job.created_at)),
        ("started", _time(job.started_at)),
        ("finished", _time(job.finished_at)),
        ("next attempt", _time(job.run_after)),
        ("error", e(job.last_error or "")),
    ]
    if job.flow is not None:
        step = "" if job.flow.step is None else f", step {job.flow.step}"
        if flow is None:
            where = f"{e(str(job.flow.flow_id))} (gone)"
        else:
            where = (
                f'<a href="{ops_path(f"/flows/{flow.id}")}" id=flow-link>{e(_flow_title(flow))}</a>'
            )
        fields.append(("flow", f"{where}: {job.flow.role.value}{step}"))
    progress = ""
    if job.progress is not None:
        p = job.progress
        progress = "<h2>Progress</h2>" + _fields(
            "progress",
            [
                ("current", _amount(p.current)),
                ("total", "" if p.total is None else _amount(p.total)),
                ("message", e(p.message or "")),
                ("reported", _time(p.updated_at)),
            ],
        )
    return _page(
        f"jobrail ops - job {job.id}",
        f"<h1>job {e(job.type)}</h1>"
        + _top(csrf, refresh=not job.status.is_terminal, back=True)
        + _fields("job", fields)
        + progress
        + _events_table(found),
        refresh=not job.status.is_terminal,
    )


def _events_table(found: OpsJob) -> str:
    if not found.events:
        return "<h2>Events</h2><p class=muted id=events>None kept.</p>"
    rows = "".join(
        f'<tr data-event="{line.event.cursor}"'
        + ("" if line.folded is None else f' data-folded="{line.folded}"')
        + f"><td>{_time(line.event.at)}</td><td>{html.escape(line.event.name)}</td>"
        f"<td>{line.event.status.value}</td><td>{line.event.attempts}</td>"
        f"<td class=err>{_line_details(line)}</td></tr>"
        for line in found.events
    )
    more = (
        f"<p class=muted id=events-shown>The first {len(found.events)} lines.</p>"
        if found.more_events
        else ""
    )
    return (
        "<h2>Events</h2><table id=events><tr><th>at</th><th>event</th><th>status</th>"
        f"<th>attempts</th><th>details</th></tr>{rows}</table>{more}"
    )


def _line_details(line: StoryLine) -> str:
    details = _event_details(line.event)
    if line.folded is not None and line.folded > 1:
        return f"{details} (the newest of {line.folded})"
    return details


def _event_details(event: JobEvent) -> str:
    """What the event says beyond the job's status: how far it got, what it waits for,
    or its error (escaped)."""
    error = html.escape((event.last_error or "")[:300])
    if event.name == "progress":
        return _progress(event.progress)
    if event.name == "deferred" and event.waiting is not None:
        return _wait(event.waiting)
    if event.name == "retrying":
        return f"next attempt {_time(event.run_after)}: {error}"
    if event.name in ("failed", "cancelled"):
        return error
    return ""


def _wait(wait: Wait) -> str:
    on = ", ".join(f"{w.kind} {w.name} ({w.key})" for w in wait.on)
    return html.escape(f"waits for {on} until {_time(wait.until)}")


_COUNTS = ("total", "pending", "running", "succeeded", "failed", "cancelled")


def _flows_table(flows: list[FlowView]) -> str:
    e = html.escape
    rows = "".join(
        f'<tr data-flow="{view.flow.id}"><td>{_time(view.flow.created_at)}</td>'
        f"<td>{view.flow.kind.value}</td>"
        f'<td><a href="{ops_path(f"/flows/{view.flow.id}")}">'
        f"{e(view.flow.name or str(view.flow.id))}</a>"
        f'</td><td data-field="status">{_flow_status(view.flow)}</td>'
        + _count_cells(view.counts, row=False)
        + f"<td>{_time(view.flow.finished_at)}</td><td>{e(view.flow.tenant_id)}</td></tr>"
        for view in flows
    )
    return (
        "<h2>Batches and chains</h2><table id=flows><tr><th>created</th><th>kind</th>"
        "<th>name</th><th>status</th>"
        + "".join(f"<th>{name}</th>" for name in _COUNTS)
        + f"<th>finished</th><th>tenant</th></tr>{rows}</table>"
    )


def _webhooks_tables(overview: WebhooksOverview) -> str:
    e = html.escape
    rows = "".join(
        f'<tr data-tenant="{e(row.tenant_id)}"><td>{e(row.tenant_id)}</td>'
        f"<td>{row.webhooks}</td><td>{row.succeeded}</td>"
        f'<td class="{"bad" if row.failed else ""}">{row.failed}</td><td>{row.waiting}</td></tr>'
        for row in overview.tenants
    )
    more = (
        f"<p class=muted id=webhook-tenants-shown>The {len(overview.tenants)} of "
        f"{overview.tenants_total} tenants with the most failed deliveries.</p>"
        if len(overview.tenants) < overview.tenants_total
        else ""
    )
    failed = "".join(
        f"<tr><td>{_time(f.job.created_at)}</td><td>{_job_link(f.job)}</td>"
        f"<td>{e(f.job.tenant_id)}</td><td>{e(f.receiver)}</td><td>{f.job.attempts}</td>"
        f"<td class=err>{e((f.job.last_error or '')[:300])}</td></tr>"
        for f in overview.failed
    )
    return (
        "<h2>Webhooks</h2><p class=muted>Deliveries enqueued in the last 24 h; a failed "
        "one is redriven from its job.</p><table id=webhooks><tr><th>tenant</th>"
        "<th>webhooks</th><th>succeeded</th><th>failed</th><th>pending or retrying</th>"
        f"</tr>{rows}</table>{more}"
        "<h2>Failed deliveries</h2><table id=webhook-failures><tr><th>enqueued</th>"
        "<th>delivery</th><th>tenant</th><th>receiver</th><th>attempts</th><th>error</th>"
        f"</tr>{failed}</table>"
    )


def _count_cells(counts: FlowCounts, *, row: bool = True) -> str:
    cells = "".join(f'<td data-field="{name}">{getattr(counts, name)}</td>' for name in _COUNTS)
    return f"<tr>{cells}</tr>" if row else cells


def _flow_status(flow: Flow) -> str:
    bad = ' class="bad"' if flow.status is FlowStatus.FAILED else ""
    cancelling = " (cancel requested)" if flow.cancel_requested and not flow.finished else ""
    return f"<span{bad}>{flow.status.value}</span>{cancelling}"


def _flow_title(flow: Flow) -> str:
    return f"{flow.kind.value} {flow.name or flow.id}"


def _job_link(job: Job, text: str | None = None) -> str:
    return f'<a href="{ops_path(f"/jobs/{job.id}")}">{html.escape(text or str(job.id))}</a>'


def _fields(table_id: str, fields: list[tuple[str, str]]) -> str:
    """A table of names and values (the values already escaped)."""
    rows = "".join(
        f'<tr><th>{name}</th><td data-field="{name}">{value}</td></tr>' for name, value in fields
    )
    return f"<table id={table_id} class=fields>{rows}</table>"


def _progress(progress: JobProgress | None) -> str:
    if progress is None:
        return ""
    done = _amount(progress.current)
    if progress.total is not None:
        done += f" / {_amount(progress.total)}"
    return done + (f" {html.escape(progress.message)}" if progress.message else "")


def _amount(value: int | float) -> str:
    return str(value) if isinstance(value, int) else f"{value:.2f}".rstrip("0").rstrip(".")


def _time(value: datetime | None) -> str:
    return "" if value is None else value.isoformat(sep=" ", timespec="seconds")[:19]


def _top(csrf: str | None, *, refresh: bool, back: bool = False) -> str:
    """The line under a page's title: whether it refreshes, the way back to the overview,
    and the sign-out form (a session's only; a Bearer key has none to end)."""
    return (
        "<p class=muted>"
        + (f'<a href="{ops_path()}" id=back>Back to the overview</a>. ' if back else "")
        + (f"Refreshes every {REFRESH_S}s. " if refresh else "")
        + (
            f'<form method=post action="{ops_path("/logout")}">'
            f'<input type=hidden name=csrf_token value="{csrf}">'
            "<button id=sign-out>Sign out</button></form>"
            if csrf
            else ""
        )
        + "</p>"
    )
