"""The ops page's HTML, rendered on the server: every value from the database or the
broker goes through html.escape, and the page's one stylesheet is allowed by its hash
(jobrail.ops.console sends CONTENT_SECURITY_POLICY with every response)."""

import html
from collections import defaultdict

from jobrail.jobs.domain import FlowRole, JobStatus
from jobrail.jobs.flow import FlowKind
from jobrail.jobs.workflows import FlowView
from jobrail.ops.overview import OpsOverview
from jobrail.ops.page_parts import (
    COUNTS,
    count_cells,
    fields_table,
    flow_status,
    flow_title,
    job_link,
    ops_path,
    page,
    progress_text,
    top_bar,
    when,
)
from jobrail.ops.views import OpsFlow
from jobrail.webhooks.use_cases import WebhooksOverview


def login_page(csrf: str, problem: str = "") -> str:
    note = f'<p class="bad">{html.escape(problem)}</p>' if problem else ""
    return page(
        "jobrail ops - sign in",
        "<h1>jobrail ops</h1><p class=muted>Sign in with an admin API key.</p>"
        f'{note}<form method=post action="{ops_path("/login")}">'
        f'<input type=hidden name=csrf_token value="{html.escape(csrf)}">'
        "<input type=password name=api_key id=api_key autocomplete=off size=50 required> "
        "<button type=submit id=sign-in>Sign in</button></form>",
    )


def refused_page() -> str:
    return page(
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
        f"<tr><td>{when(job.finished_at)}</td><td>{job_link(job, job.type)}</td>"
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
    return page(
        "jobrail ops",
        "<h1>jobrail ops</h1>" + top_bar(csrf, refresh=True) + f"<div class=cards>{cards}</div>"
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
    return page(
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
        ("status", flow_status(flow)),
        ("created", when(flow.created_at)),
        ("finished", when(flow.finished_at)),
    ]
    callbacks = "".join(
        f'<tr data-role="{role.value}"><td>{role.value}</td><td>{job_link(job)}</td>'
        f'<td data-field="status">{job.status.value}</td><td>{job.attempts}</td>'
        f"<td class=err>{e((job.last_error or '')[:300])}</td></tr>"
        for role in (FlowRole.THEN, FlowRole.CATCH, FlowRole.FINALLY)
        if (job := found.callbacks.get(role)) is not None
    )
    members = "".join(
        f'<tr data-job="{job.id}"><td>{"" if job.flow is None else job.flow.step}</td>'
        f"<td>{job_link(job)}</td><td>{e(job.type)}</td>"
        f'<td data-field="status">{job.status.value}</td><td>{job.attempts}</td>'
        f"<td>{progress_text(job.progress)}</td>"
        f"<td class=err>{e((job.last_error or '')[:300])}</td></tr>"
        for job in found.members
    )
    more = (
        f"<p class=muted id=members-shown>The first {len(found.members)} of {counts.total}.</p>"
        if len(found.members) < counts.total
        else ""
    )
    title = flow_title(flow)
    return page(
        f"jobrail ops - {title}",
        f"<h1>{e(title)}</h1>"
        + top_bar(csrf, refresh=not flow.finished, back=True)
        + fields_table("flow", fields)
        + "<h2>Counts</h2><table id=flow-counts><tr>"
        + "".join(f"<th>{name}</th>" for name in COUNTS)
        + "</tr>"
        + count_cells(counts)
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


def _flows_table(flows: list[FlowView]) -> str:
    e = html.escape
    rows = "".join(
        f'<tr data-flow="{view.flow.id}"><td>{when(view.flow.created_at)}</td>'
        f"<td>{view.flow.kind.value}</td>"
        f'<td><a href="{ops_path(f"/flows/{view.flow.id}")}">'
        f"{e(view.flow.name or str(view.flow.id))}</a>"
        f'</td><td data-field="status">{flow_status(view.flow)}</td>'
        + count_cells(view.counts, row=False)
        + f"<td>{when(view.flow.finished_at)}</td><td>{e(view.flow.tenant_id)}</td></tr>"
        for view in flows
    )
    return (
        "<h2>Batches and chains</h2><table id=flows><tr><th>created</th><th>kind</th>"
        "<th>name</th><th>status</th>"
        + "".join(f"<th>{name}</th>" for name in COUNTS)
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
        f"<tr><td>{when(f.job.created_at)}</td><td>{job_link(f.job)}</td>"
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
