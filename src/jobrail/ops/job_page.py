"""A job's page of the ops console: its fields, its result or error, and its story
(the same lines as ``GET /jobs/{id}/events``: lifecycle events, each run of progress
folded into its newest)."""

import html

from jobrail.events.feed import JobEvent, StoryLine
from jobrail.jobs.domain import Wait
from jobrail.ops.page_parts import (
    amount,
    fields_table,
    flow_title,
    ops_path,
    page,
    progress_text,
    top_bar,
    when,
)
from jobrail.ops.views import OpsJob


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
        ("created", when(job.created_at)),
        ("started", when(job.started_at)),
        ("finished", when(job.finished_at)),
        ("next attempt", when(job.run_after)),
        ("error", e(job.last_error or "")),
    ]
    if job.flow is not None:
        step = "" if job.flow.step is None else f", step {job.flow.step}"
        if flow is None:
            where = f"{e(str(job.flow.flow_id))} (gone)"
        else:
            where = (
                f'<a href="{ops_path(f"/flows/{flow.id}")}" id=flow-link>{e(flow_title(flow))}</a>'
            )
        fields.append(("flow", f"{where}: {job.flow.role.value}{step}"))
    progress = ""
    if job.progress is not None:
        p = job.progress
        progress = "<h2>Progress</h2>" + fields_table(
            "progress",
            [
                ("current", amount(p.current)),
                ("total", "" if p.total is None else amount(p.total)),
                ("message", e(p.message or "")),
                ("reported", when(p.updated_at)),
            ],
        )
    return page(
        f"jobrail ops - job {job.id}",
        f"<h1>job {e(job.type)}</h1>"
        + top_bar(csrf, refresh=not job.status.is_terminal, back=True)
        + fields_table("job", fields)
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
        + f"><td>{when(line.event.at)}</td><td>{html.escape(line.event.name)}</td>"
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
        return progress_text(event.progress)
    if event.name == "deferred" and event.waiting is not None:
        return _wait(event.waiting)
    if event.name == "retrying":
        return f"next attempt {when(event.run_after)}: {error}"
    if event.name in ("failed", "cancelled"):
        return error
    return ""


def _wait(wait: Wait) -> str:
    on = ", ".join(f"{w.kind} {w.name} ({w.key})" for w in wait.on)
    return html.escape(f"waits for {on} until {when(wait.until)}")
