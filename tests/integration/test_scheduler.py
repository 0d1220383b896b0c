"""The scheduler on the real Redis, Postgres and RabbitMQ: two ``jobrail scheduler``
processes side by side, the leader killed midway, one job per period; and the
scheduled housekeeping and billing auto-pay doing their work."""

import asyncio
import json
import logging
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import insert, select, text
from sqlalchemy.ext.asyncio import AsyncEngine

from jobrail.jobs.domain import JobStatus
from jobrail.kernel.clock import SystemClock
from jobrail.maintenance.persistence import SqlaFinishedJobs
from jobrail.maintenance.use_cases import CheckOutboxLag, PruneFinishedJobs, ReportDeadLetters
from jobrail.ops.persistence import SqlaOpsReadModel
from jobrail.runtime.app import runtime_of
from jobrail.scheduler import SYSTEM_TENANT, Schedule
from jobrail.store.mapping import job_row
from jobrail.store.tables import jobs, outbox
from tests.fakes import make_job
from tests.support.fixtures import ApiClient
from tests.support.processes import BIN, Process
from tests.support.rabbit import RabbitProbe
from tests.support.services import wait_for

TTL_S = 3.0
TICK_S = 0.25
# What a loaded machine may add to any wall-clock bound: the scheduler's tick, a database
# round trip and the OS scheduling two processes among others on two busy cores. The
# promises checked below (one job per period, no gap, one leader at a time) hold whatever
# this is; only the lateness bounds use it.
SLACK_S = 4.0
FAST = {
    "prune-jobs": "*/5 * * * * *",
    "outbox-lag": "*/5 * * * * *",
    "dlq-report": "*/3 * * * * *",
    "billing-auto-pay": "*/2 * * * * *",
}


def scheduler_env(stack_env: dict[str, str]) -> dict[str, str]:
    return {
        **stack_env,
        "JOBRAIL_SCHEDULER__TICK_S": str(TICK_S),
        "JOBRAIL_SCHEDULER__LEADER_TTL_S": str(TTL_S),
        "JOBRAIL_SCHEDULER__CATCH_UP_S": "20",
        "JOBRAIL_SCHEDULER__SCHEDULES": json.dumps({n: {"cron": c} for n, c in FAST.items()}),
    }


def events(process: Process, event: str) -> list[dict[str, Any]]:
    return [r for r in process.log_records() if r.get("event") == event]


def ts(record: dict[str, Any]) -> datetime:
    return datetime.fromisoformat(record["ts"])


async def test_two_schedulers_running_side_by_side_for_a_minute_fire_each_periodic_job_once(
    stack_env: dict[str, str], engine: AsyncEngine, rabbit: RabbitProbe
) -> None:
    env = scheduler_env(stack_env)
    first = Process([str(BIN / "jobrail"), "scheduler"], env, name="scheduler-1")
    second = Process([str(BIN / "jobrail"), "scheduler"], env, name="scheduler-2")
    try:

        async def someone_leads() -> list[Process]:
            for p in (first, second):
                assert p.alive(), p.output()[-3000:]
            return [p for p in (first, second) if events(p, "leader.acquired")]

        leaders = await wait_for(someone_leads, timeout=30, interval=0.1, what="a leader")
        assert len(leaders) == 1
        leader, standby = leaders[0], (second if leaders[0] is first else first)
        window_start = datetime.now(UTC)

        await asyncio.sleep(30)
        killed_at = datetime.now(UTC)
        leader.kill()
        await asyncio.sleep(30)
        window_end = datetime.now(UTC)
    finally:
        first.stop()
        second.stop()

    async with engine.connect() as conn:
        rows = (
            await conn.execute(
                select(
                    jobs.c.type, jobs.c.idempotency_key, jobs.c.created_at, jobs.c.entity_id
                ).where(jobs.c.tenant_id == SYSTEM_TENANT)
            )
        ).all()
    by_key = Counter(row.idempotency_key for row in rows)
    created = {row.idempotency_key: row.created_at for row in rows}

    # No double fire: one job per period key, whoever fired it and however often.
    assert set(by_key.values()) == {1}
    failover_bound = TTL_S + TICK_S + SLACK_S
    for name, cron in FAST.items():
        schedule = Schedule(name, cron=cron, job_type="-")
        window = list(schedule.periods(window_start, window_end - timedelta(seconds=SLACK_S)))
        assert len(window) >= 55 // int(cron.split()[0][2:])
        for period in window:
            key = schedule.period_key(period)
            # No gap: every period of the minute has its job...
            assert key in by_key, f"no job for {key}"
            late = (created[key] - period).total_seconds()
            # ...made as the period starts, or within TTL + tick of it during the failover.
            during_failover = (
                killed_at - timedelta(seconds=1)
                <= period
                <= killed_at + timedelta(seconds=failover_bound)
            )
            assert late <= (failover_bound if during_failover else SLACK_S), (key, late)

    # One leader at a time: the standby fired nothing until the leader was killed, then
    # took over within TTL + tick.
    took_over = events(standby, "leader.acquired")
    assert len(took_over) == 1
    assert killed_at < ts(took_over[0]) <= killed_at + timedelta(seconds=failover_bound)
    assert all(ts(r) > killed_at for r in events(standby, "schedule.fired"))
    fresh = Counter(
        r["key"] for p in (first, second) for r in events(p, "schedule.fired") if r["job_created"]
    )
    assert set(fresh.values()) == {1}
    assert events(standby, "leader.resigned")  # stopped with SIGTERM: handed the lock back


async def test_a_scheduler_with_an_override_for_an_unknown_schedule_stops_at_start_up(
    stack_env: dict[str, str],
) -> None:
    env = {**stack_env, "JOBRAIL_SCHEDULER__SCHEDULES": '{"nightly-report": {"enabled": false}}'}
    process = Process([str(BIN / "jobrail"), "scheduler"], env, name="scheduler-bad")

    code = await asyncio.to_thread(process.proc.wait, 60)

    assert code == 2
    assert "nightly-report" in process.output()


# -- what the schedules run ---------------------------------------------------------


async def test_pruning_deletes_finished_jobs_older_than_the_setting_and_keeps_the_rest(
    engine: AsyncEngine,
) -> None:
    now = datetime.now(UTC)
    old, recent = now - timedelta(days=31), now - timedelta(days=29)

    def finished(status: JobStatus, at: datetime) -> dict[str, Any]:
        job = make_job(now=at - timedelta(minutes=1))
        job.status, job.finished_at = status, at
        return job_row(job)

    rows = {
        "old succeeded": finished(JobStatus.SUCCEEDED, old),
        "old failed": finished(JobStatus.FAILED, old),
        "old cancelled": finished(JobStatus.CANCELLED, old),
        "recent succeeded": finished(JobStatus.SUCCEEDED, recent),
        "old pending": job_row(make_job(now=old)),
    }
    async with engine.begin() as conn:
        await conn.execute(insert(jobs), list(rows.values()))
    prune = PruneFinishedJobs(SqlaFinishedJobs(engine), SystemClock(), timedelta(days=30), batch=2)

    pruned = await prune()

    async with engine.connect() as conn:
        left = set((await conn.execute(select(jobs.c.id))).scalars())
    assert pruned.deleted == 3
    assert left == {rows["recent succeeded"]["id"], rows["old pending"]["id"]}


async def test_an_outbox_row_unpublished_past_the_threshold_is_logged_as_a_warning(
    engine: AsyncEngine, caplog: pytest.LogCaptureFixture
) -> None:
    check = CheckOutboxLag(SqlaOpsReadModel(engine), SystemClock(), timedelta(seconds=60))
    assert (await check()).lag_s == 0

    async with engine.begin() as conn:
        await conn.execute(
            insert(outbox).values(
                id=make_job().id,
                queue="jobs.default",
                body=b"{}",
                headers={},
                created_at=datetime.now(UTC) - timedelta(seconds=90),
            )
        )
    with caplog.at_level(logging.WARNING, logger="jobrail.maintenance"):
        lag = await check()

    assert lag.lagging is True
    assert 89 < lag.lag_s < 120
    assert any("outbox lag" in r.getMessage() for r in caplog.records)


async def test_the_dlq_report_logs_how_many_messages_wait_in_the_dead_letter_queue(
    api: ApiClient, rabbit: RabbitProbe, caplog: pytest.LogCaptureFixture
) -> None:
    report = await runtime_of(api.app).container.get(ReportDeadLetters)
    dlq = rabbit.topology.dead_letter_queue
    for n in range(3):
        await rabbit.publish_raw(dlq, f"dead {n}".encode())

    async def all_there() -> bool:
        return (await rabbit.depth(dlq))[0] == 3

    await wait_for(all_there, timeout=10, what="3 dead letters")
    with caplog.at_level(logging.INFO, logger="jobrail.maintenance"):
        waiting = await report()

    assert waiting == 3
    assert any(
        r.levelno == logging.WARNING and "3 messages wait" in r.getMessage() for r in caplog.records
    )


async def test_auto_pay_pays_an_issued_invoice_that_opted_in_through_a_real_worker(
    api: ApiClient, workers: Any, engine: AsyncEngine
) -> None:
    await workers()
    body = {
        "customer_id": "c1",
        "customer_email": "buyer@example.com",
        "currency": "EUR",
        "lines": [{"description": "plan", "quantity": 1, "unit_price_minor": 900}],
    }
    auto = (await api.post("/billing/invoices", json={**body, "auto_pay": True})).json()
    manual = (await api.post("/billing/invoices", json=body)).json()
    for invoice in (auto, manual):
        assert (await api.post(f"/billing/invoices/{invoice['id']}/issue")).status_code == 200
    assert auto["auto_pay"] is True
    assert manual["auto_pay"] is False

    # Two runs, which a worker may take in either order or at once: one payment.
    runs = [await api.enqueue("billing.auto_pay", {}, tenant=SYSTEM_TENANT) for _ in range(2)]

    async def paid() -> bool:
        invoice = (await api.get(f"/billing/invoices/{auto['id']}")).json()
        return bool(invoice["status"] == "paid")

    await wait_for(paid, timeout=30, what="the auto-pay invoice to be paid")

    async def both_ran() -> bool:
        async with engine.connect() as conn:
            done = await conn.execute(
                select(jobs.c.id).where(jobs.c.id.in_(runs), jobs.c.status == "succeeded")
            )
            return len(done.all()) == 2

    await wait_for(both_ran, timeout=30, what="both auto-pay runs")
    async with engine.connect() as conn:
        payments = (
            (
                await conn.execute(
                    text("SELECT tenant_id FROM jobs WHERE type = 'billing.pay_invoice'")
                )
            )
            .scalars()
            .all()
        )
        results = list(
            (await conn.execute(select(jobs.c.result).where(jobs.c.id.in_(runs)))).scalars()
        )
    assert payments == [api.tenant_id]
    assert sorted(r["enqueued"] for r in results) == [0, 1]
    # The run that came second saw the invoice still issued (due 1) or already paid (0).
    assert sorted(r["due"] for r in results) in ([0, 1], [1, 1])
    assert (await api.get(f"/billing/invoices/{manual['id']}")).json()["status"] == "issued"


async def test_auto_pay_enqueued_by_a_tenant_is_refused(api: ApiClient, workers: Any) -> None:
    await workers()

    job_id = await api.enqueue("billing.auto_pay", {})
    job = await api.wait_status(job_id, "failed", timeout=30)

    assert "only the scheduler" in job["last_error"]
