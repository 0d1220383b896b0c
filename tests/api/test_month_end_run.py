"""Billing's month-end run through the API in embedded mode: one batch issues every due
invoice, its `finally` callback finishes the run, and notifications e-mail one summary
with the run's figures; running it again for the month starts nothing."""

import logging
from datetime import UTC, datetime
from typing import Any

import pytest

from tests.support.fixtures import ApiClient
from tests.support.services import wait_for

SUMMARY = "month_end_summary"


def this_month() -> str:
    return datetime.now(UTC).strftime("%Y-%m")


async def _invoice(api: ApiClient, *, lines: int = 1, headers: dict[str, str] | None = None) -> str:
    created = await api.post(
        "/billing/invoices",
        json={
            "customer_id": "cust-1",
            "customer_email": "buyer@example.com",
            "currency": "EUR",
            "lines": [
                {"description": f"line {n}", "quantity": 1, "unit_price_minor": 1000}
                for n in range(lines)
            ],
        },
        headers=headers or {},
    )
    assert created.status_code == 201, created.text
    invoice_id: str = created.json()["id"]
    return invoice_id


async def _status(api: ApiClient, invoice_id: str, headers: dict[str, str] | None = None) -> str:
    status: str = (await api.get(f"/billing/invoices/{invoice_id}", headers=headers)).json()[
        "status"
    ]
    return status


async def _finished_run(api: ApiClient, month: str) -> dict[str, Any]:
    async def finished() -> dict[str, Any] | None:
        body: dict[str, Any] = (await api.get(f"/billing/month-end-runs/{month}")).json()
        return body if body["status"] == "finished" else None

    run: dict[str, Any] = await wait_for(finished, timeout=20, what=f"the run of {month}")
    return run


async def _sent_summaries(api: ApiClient) -> list[dict[str, Any]]:
    async def sent() -> list[dict[str, Any]] | None:
        items = (await api.get("/notifications")).json()["items"]
        summaries = [n for n in items if n["template"] == SUMMARY]
        return summaries if summaries and all(n["status"] == "sent" for n in summaries) else None

    found: list[dict[str, Any]] = await wait_for(sent, timeout=20, what="the summary to be sent")
    return found


def _summary_mails(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "contexts.notifications" and "Month-end run" in r.getMessage()
    ]


async def test_the_month_end_run_issues_every_due_invoice_and_sends_one_summary(
    api: ApiClient, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="contexts.notifications")
    month = this_month()
    due = [await _invoice(api, lines=2) for _ in range(4)]
    empty = await _invoice(api, lines=0)  # due, but an empty invoice cannot be issued
    voided = await _invoice(api)
    assert (await api.post(f"/billing/invoices/{voided}/void")).status_code == 200
    globex = await api.auth("globex")
    other_tenants = await _invoice(api, headers=globex)

    started = await api.post(
        "/billing/month-end-runs", json={"month": month, "report_to": "finance@demo.example"}
    )

    assert started.status_code == 202, started.text
    assert "Idempotent-Replayed" not in started.headers
    assert started.json()["due"] == 5
    batch_id = started.json()["batch_id"]
    run = await _finished_run(api, month)
    assert (run["due"], run["issued"], run["failed"]) == (5, 4, 1)
    assert run["batch_id"] == batch_id
    assert [await _status(api, i) for i in due] == ["issued"] * 4
    assert await _status(api, empty) == "draft"
    assert await _status(api, voided) == "void"
    assert await _status(api, other_tenants, globex) == "draft"

    batch = (await api.get(f"/batches/{batch_id}")).json()
    assert batch["status"] == "failed"
    assert batch["counts"] == {
        "total": 5,
        "pending": 0,
        "running": 0,
        "succeeded": 4,
        "failed": 1,
        "cancelled": 0,
    }
    # The callback's handler marks the run finished before the callback's own outcome
    # is recorded: wait for that outcome, whatever it is, then check it.
    finish = await api.wait_status(
        batch["callbacks"]["finally"], "succeeded", "failed", "cancelled", "blocked"
    )
    assert finish["status"] == "succeeded"
    assert finish["result"] == {"month": month, "issued": 4, "failed": 1}

    [summary] = await _sent_summaries(api)
    assert summary["recipient"] == "finance@demo.example"
    assert summary["subject_id"] == month
    [mail] = _summary_mails(caplog)
    assert f"Month-end run {month}: 4 of 5 invoices issued" in mail
    assert "Invoices due: 5\nIssued: 4\nNot issued: 1" in mail


async def test_a_second_run_for_the_same_month_starts_nothing(
    api: ApiClient, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="contexts.notifications")
    month = this_month()
    first_invoice = await _invoice(api)
    body = {"month": month, "report_to": "finance@demo.example"}
    first = (await api.post("/billing/month-end-runs", json=body)).json()
    await _finished_run(api, month)
    await _sent_summaries(api)
    later = await _invoice(api)  # due for the month, but its run has been

    again = await api.post("/billing/month-end-runs", json={**body, "report_to": "x@y.example"})

    assert again.status_code == 202
    assert again.headers["Idempotent-Replayed"] == "true"
    assert again.json()["batch_id"] == first["batch_id"]
    assert again.json()["report_to"] == "finance@demo.example"
    assert (again.json()["due"], again.json()["issued"]) == (1, 1)
    assert await _status(api, first_invoice) == "issued"
    assert await _status(api, later) == "draft"
    batch = (await api.get(f"/batches/{first['batch_id']}")).json()
    assert batch["counts"]["total"] == 1
    for job_type in ("billing.issue_invoice", "billing.finish_month_end"):
        jobs = (await api.get("/jobs", params={"type": job_type})).json()["items"]
        assert len(jobs) == 1, job_type  # the second run wrote no job
    assert len(await _sent_summaries(api)) == 1
    assert len(_summary_mails(caplog)) == 1


async def test_a_run_with_nothing_due_finishes_at_once_and_still_reports(
    api: ApiClient, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="contexts.notifications")
    month = this_month()

    started = await api.post(
        "/billing/month-end-runs", json={"month": month, "report_to": "finance@demo.example"}
    )

    assert started.status_code == 202, started.text
    run = started.json()
    assert (run["status"], run["due"], run["issued"], run["failed"]) == ("finished", 0, 0, 0)
    assert run["batch_id"] is None
    [summary] = await _sent_summaries(api)
    assert summary["subject_id"] == month
    [mail] = _summary_mails(caplog)
    assert "Invoices due: 0\nIssued: 0\nNot issued: 0" in mail


async def test_a_run_is_refused_for_a_month_not_begun_and_is_the_tenants_own(
    api: ApiClient,
) -> None:
    body = {"month": "2999-01", "report_to": "finance@demo.example"}
    future = await api.post("/billing/month-end-runs", json=body)
    assert future.status_code == 409
    assert "has not begun" in future.json()["error"]["message"]
    bad = await api.post("/billing/month-end-runs", json={**body, "month": "2026-13"})
    assert bad.status_code == 422
    assert (await api.get("/billing/month-end-runs/2026-13")).status_code == 422
    month = this_month()
    await api.post("/billing/month-end-runs", json={**body, "month": month})
    assert (await api.get(f"/billing/month-end-runs/{month}")).status_code == 200
    globex = await api.auth("globex")
    assert (await api.get(f"/billing/month-end-runs/{month}", headers=globex)).status_code == 404
