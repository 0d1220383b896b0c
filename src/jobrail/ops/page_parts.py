"""What every console page shares: its Content Security Policy, its place under the app's
mount point, and the small renderings the templates use (a time, an amount, a job's
progress), as plain text for the templates to escape."""

import contextlib
import re
from collections.abc import Iterator
from contextvars import ContextVar
from datetime import datetime

from jobrail.jobs.progress import JobProgress

# The path the API is mounted at (the ASGI root_path, "/jobrail" under a host's
# app.mount("/jobrail", ...)), for the console's links, forms, redirects and cookies:
# set for each request by jobrail.ops.console, read by `ops_path`. A context variable, so
# that every page and helper need not take it as an argument.
_MOUNTED_AT: ContextVar[str] = ContextVar("jobrail_ops_mounted_at", default="")


REFRESH_S = 5


# The console's own stylesheet and htmx, both served from /ops/static (this origin), and
# htmx's requests to this origin: nothing inline runs or styles, nothing else loads.
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
    "img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
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


def progress_text(progress: JobProgress | None) -> str:
    if progress is None:
        return ""
    done = amount(progress.current)
    if progress.total is not None:
        done += f" / {amount(progress.total)}"
    return done + (f" {progress.message}" if progress.message else "")


def amount(value: int | float) -> str:
    return str(value) if isinstance(value, int) else f"{value:.2f}".rstrip("0").rstrip(".")


def when(value: datetime | None) -> str:
    return "" if value is None else value.isoformat(sep=" ", timespec="seconds")[:19]
