"""The console's pages, rendered on the server from their templates (jobrail.ops.rendering):
each function gathers what its template shows. `live_only` answers htmx's refresh of a
page with the part of it that refreshes."""

from collections import defaultdict
from typing import Any

from jobrail.jobs.domain import FlowRole, JobStatus
from jobrail.jobs.workflows import FlowView
from jobrail.ops.charts import Series, bar_chart, line_chart
from jobrail.ops.job_page import attempts_of, line_details
from jobrail.ops.overview import OpsOverview
from jobrail.ops.rendering import render
from jobrail.ops.views import OpsFlow, OpsJob
from jobrail.webhooks.use_cases import WebhooksOverview


def login_page(csrf: str, problem: str = "") -> str:
    return render("login.html", csrf=csrf, problem=problem)


def message_page(message: str, element_id: str = "", back: str = "", back_text: str = "") -> str:
    return render(
        "message.html", message=message, element_id=element_id, back=back, back_text=back_text
    )


def refused_page() -> str:
    return message_page("That form did not come from this page")


def not_found_page(what: str) -> str:
    return message_page(f"No {what} with that id", element_id="not-found")


def overview_page(
    overview: OpsOverview,
    flows: list[FlowView],
    webhooks: WebhooksOverview,
    csrf: str | None,
    *,
    live_only: bool = False,
) -> str:
    statuses = [status.value for status in JobStatus]
    by_type: dict[str, dict[str, int]] = defaultdict(dict)
    totals: dict[str, int] = defaultdict(int)
    for count in overview.counts:
        by_type[count.type][count.status.value] = count.count
        totals[count.status.value] += count.count
    dlq = next((q.ready for q in overview.queues or [] if q.queue.endswith("dlq")), None)
    timeline = overview.timeline
    minutes = timeline.minutes
    charts = [
        bar_chart(
            "chart-throughput", "Jobs finished per minute", "jobs", minutes, timeline.finished
        ),
        bar_chart("chart-failures", "Jobs failed per minute", "jobs", minutes, timeline.failed),
        line_chart(
            "chart-start",
            "Time to start (p50, p95)",
            "s",
            minutes,
            [Series("p50", timeline.start_p50), Series("p95", timeline.start_p95)],
        ),
        line_chart(
            "chart-waiting",
            "Jobs waiting, by queue",
            "jobs",
            minutes,
            [Series(queue, values) for queue, values in timeline.waiting.items()],
        ),
    ]
    return render(
        "overview.html",
        live_only=live_only,
        csrf=csrf,
        statuses=statuses,
        by_type=sorted(by_type.items()),
        totals=totals,
        queues=overview.queues,
        dlq=dlq,
        charts=charts,
        lag=overview.outbox_lag.total_seconds(),
        failures=overview.failures,
        flows=flows,
        webhooks=webhooks,
    )


def flow_page(found: OpsFlow, csrf: str | None, *, live_only: bool = False) -> str:
    flow = found.view.flow
    callbacks = [
        (role, job)
        for role in (FlowRole.THEN, FlowRole.CATCH, FlowRole.FINALLY)
        if (job := found.callbacks.get(role)) is not None
    ]
    return render(
        "flow.html",
        live_only=live_only,
        csrf=csrf,
        found=found,
        title=f"{flow.kind.value} {flow.name or flow.id}",
        callbacks=callbacks,
    )


def job_page(
    found: OpsJob,
    csrf: str | None,
    *,
    waiting: dict[str, Any] | None = None,
    note: str = "",
    live_only: bool = False,
) -> str:
    """A job's page: its fields, what it waits for (`waiting`, as ``GET /jobs/{id}``
    has it), its payload and result, its attempts and its events, with the actions its
    status allows."""
    return render(
        "job.html",
        live_only=live_only,
        csrf=csrf,
        job=found.job,
        flow=found.flow,
        waiting=waiting,
        note=note,
        attempts=attempts_of(found.events, found.failures),
        events=[(line, line_details(line)) for line in found.events],
        more_events=found.more_events,
    )
