"""The parts every ops page is made of: the page itself (its style, its Content Security
Policy, its top bar, its place under the app's mount point) and the small renderings
the pages share (a time, an amount, a job's progress, a flow's counts and title)."""

import base64
import contextlib
import hashlib
import html
import re
from collections.abc import Iterator
from contextvars import ContextVar
from datetime import datetime

from jobrail.jobs.domain import Job
from jobrail.jobs.flow import Flow, FlowCounts, FlowStatus
from jobrail.jobs.progress import JobProgress

# The path the API is mounted at (the ASGI root_path, "/jobrail" under a host's
# app.mount("/jobrail", ...)), for the console's links, forms, redirects and cookies:
# set for each request by jobrail.ops.console, read by `ops_path`. A context variable, so
# that every page and helper need not take it as an argument.
_MOUNTED_AT: ContextVar[str] = ContextVar("jobrail_ops_mounted_at", default="")


REFRESH_S = 5


STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#1d2330;background:#f6f7f9}
h1{font-size:20px;margin:0 0 4px} h2{font-size:15px;margin:24px 0 8px}
.muted{color:#6b7280} table{border-collapse:collapse;background:#fff}
th,td{border:1px solid #e1e4e8;padding:4px 10px;text-align:right}
th:first-child,td:first-child{text-align:left} td.err{text-align:left;max-width:48em}
.cards{display:flex;gap:12px} .card{background:#fff;border:1px solid #e1e4e8;padding:10px 16px}
.card b{display:block;font-size:22px} .bad{color:#b42318}
form{display:inline} input{font:inherit;padding:4px} table.fields td{text-align:left}
"""


STYLE_HASH = base64.b64encode(hashlib.sha256(STYLE.encode()).digest()).decode()


CONTENT_SECURITY_POLICY = (
    f"default-src 'none'; style-src 'sha256-{STYLE_HASH}'; form-action 'self'; "
    "frame-ancestors 'none'; base-uri 'none'"
)


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


def page(title: str, body: str, refresh: bool = False) -> str:
    meta = f'<meta http-equiv="refresh" content="{REFRESH_S}">' if refresh else ""
    return (
        f'<!doctype html><html lang="en"><head><meta charset="utf-8">{meta}'
        f"<title>{html.escape(title)}</title><style>{STYLE}</style></head>"
        f"<body>{body}</body></html>"
    )


COUNTS = ("total", "pending", "running", "succeeded", "failed", "cancelled")


def count_cells(counts: FlowCounts, *, row: bool = True) -> str:
    cells = "".join(f'<td data-field="{name}">{getattr(counts, name)}</td>' for name in COUNTS)
    return f"<tr>{cells}</tr>" if row else cells


def flow_status(flow: Flow) -> str:
    bad = ' class="bad"' if flow.status is FlowStatus.FAILED else ""
    cancelling = " (cancel requested)" if flow.cancel_requested and not flow.finished else ""
    return f"<span{bad}>{flow.status.value}</span>{cancelling}"


def flow_title(flow: Flow) -> str:
    return f"{flow.kind.value} {flow.name or flow.id}"


def job_link(job: Job, text: str | None = None) -> str:
    return f'<a href="{ops_path(f"/jobs/{job.id}")}">{html.escape(text or str(job.id))}</a>'


def fields_table(table_id: str, fields: list[tuple[str, str]]) -> str:
    """A table of names and values (the values already escaped)."""
    rows = "".join(
        f'<tr><th>{name}</th><td data-field="{name}">{value}</td></tr>' for name, value in fields
    )
    return f"<table id={table_id} class=fields>{rows}</table>"


def progress_text(progress: JobProgress | None) -> str:
    if progress is None:
        return ""
    done = amount(progress.current)
    if progress.total is not None:
        done += f" / {amount(progress.total)}"
    return done + (f" {html.escape(progress.message)}" if progress.message else "")


def amount(value: int | float) -> str:
    return str(value) if isinstance(value, int) else f"{value:.2f}".rstrip("0").rstrip(".")


def when(value: datetime | None) -> str:
    return "" if value is None else value.isoformat(sep=" ", timespec="seconds")[:19]


def top_bar(csrf: str | None, *, refresh: bool, back: bool = False) -> str:
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
