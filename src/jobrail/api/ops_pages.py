"""The ops page's HTML, rendered on the server: every value from the database or the
broker goes through html.escape, and the page's one stylesheet is allowed by its hash
(jobrail.api.ops sends CONTENT_SECURITY_POLICY with every response)."""

import base64
import hashlib
import html
from collections import defaultdict

from jobrail.jobs.domain import JobStatus
from jobrail.jobs.use_cases.overview import OpsOverview

REFRESH_S = 5

_STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#1d2330;background:#f6f7f9}
h1{font-size:20px;margin:0 0 4px} h2{font-size:15px;margin:24px 0 8px}
.muted{color:#6b7280} table{border-collapse:collapse;background:#fff}
th,td{border:1px solid #e1e4e8;padding:4px 10px;text-align:right}
th:first-child,td:first-child{text-align:left} td.err{text-align:left;max-width:48em}
.cards{display:flex;gap:12px} .card{background:#fff;border:1px solid #e1e4e8;padding:10px 16px}
.card b{display:block;font-size:22px} .bad{color:#b42318}
form{display:inline} input{font:inherit;padding:4px}
"""
_STYLE_HASH = base64.b64encode(hashlib.sha256(_STYLE.encode()).digest()).decode()
CONTENT_SECURITY_POLICY = (
    f"default-src 'none'; style-src 'sha256-{_STYLE_HASH}'; form-action 'self'; "
    "frame-ancestors 'none'; base-uri 'none'"
)


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
        f"{note}<form method=post action=/ops/login>"
        f'<input type=hidden name=csrf_token value="{html.escape(csrf)}">'
        "<input type=password name=api_key id=api_key autocomplete=off size=50 required> "
        "<button type=submit id=sign-in>Sign in</button></form>",
    )


def refused_page() -> str:
    return _page(
        "jobrail ops",
        "<h1>jobrail ops</h1><p class=bad>That form did not come from this page: "
        '<a href="/ops">back to the ops page</a>.</p>',
    )


def overview_page(overview: OpsOverview, csrf: str | None) -> str:
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
        f"<tr><td>{e(str(job.finished_at or ''))[:19]}</td><td>{e(job.type)}</td>"
        f"<td>{e(job.tenant_id)}</td><td>{job.attempts}</td>"
        f'<td class=err data-job="{job.id}">{e(job.last_error or "")[:300]}</td></tr>'
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
        f"<h1>jobrail ops</h1><p class=muted>Refreshes every {REFRESH_S}s. "
        + (
            "<form method=post action=/ops/logout>"
            f'<input type=hidden name=csrf_token value="{csrf}">'
            "<button id=sign-out>Sign out</button></form>"
            if csrf
            else ""
        )
        + "</p>"
        f"<div class=cards>{cards}</div>"
        f"<h2>Jobs by type and status</h2><table id=jobs><tr><th>type</th>{head}</tr>"
        f"{rows}{total_row}</tr></table>"
        f"<h2>Queues</h2>{queues}"
        "<h2>Recent failures</h2><table id=failures><tr><th>finished</th><th>type</th>"
        f"<th>tenant</th><th>attempts</th><th>error</th></tr>{failures}</table>",
        refresh=True,
    )
