"""SIGKILL a worker mid-job 20 times during a 500-job run with two workers."""

import asyncio
import random
import time
from collections import Counter
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from contexts.sync.adapters.persistence import accounts, items
from jobrail.store.tables import jobs
from tests.faults.conftest import job_counts, wait_all_terminal
from tests.support.fixtures import ApiClient
from tests.support.processes import Process
from tests.support.recorder import Recorder
from tests.support.servers import RunningSandbox, SmtpSink
from tests.support.services import wait_for

EFFECTS, INVOICES, ACCOUNTS, KILLS = 440, 30, 30, 20
PAGES = 2  # an account id ending in "-pages-2" has 2 pages of 10 items at the sandbox
WORKER = {"JOBRAIL_WORKER__MAX_ASYNC_TASKS": "4", "JOBRAIL_RABBIT__PREFETCH": "4"}


async def _pay_invoice(api: ApiClient, n: int) -> str:
    created = await api.post(
        "/billing/invoices",
        json={
            "customer_id": f"c-{n}",
            "customer_email": f"buyer-{n}@example.com",
            "currency": "EUR",
            "lines": [{"description": "Plan", "quantity": 1, "unit_price_minor": 1000 + n}],
        },
    )
    invoice_id: str = created.json()["id"]
    assert (await api.post(f"/billing/invoices/{invoice_id}/issue")).status_code == 200
    assert (await api.post(f"/billing/invoices/{invoice_id}/pay")).status_code == 200
    return invoice_id


async def _running(engine: AsyncEngine) -> int:
    return (await job_counts(engine)).get("running", 0)


async def test_twenty_sigkills_in_a_500_job_run_lose_nothing_and_duplicate_nothing(
    api: ApiClient,
    spawn_worker: Any,
    workers: Any,
    recorder: Recorder,
    smtp: SmtpSink,
    vendor: RunningSandbox,
    engine: AsyncEngine,
    report: Any,
) -> None:
    pool: list[Process] = [await workers(f"w{n}", **WORKER) for n in range(2)]
    effect_ids = set(
        await asyncio.gather(
            *(
                api.enqueue("test.effect", {"url": recorder.url, "sleep_ms": 400})
                for _ in range(EFFECTS)
            )
        )
    )
    invoice_ids = [await _pay_invoice(api, n) for n in range(INVOICES)]
    account_ids = [f"acct-{n}-pages-{PAGES}" for n in range(ACCOUNTS)]
    for account in account_ids:
        assert (await api.post(f"/sync/accounts/{account}/sync")).status_code == 202

    rng = random.Random(7)
    in_flight_at_kills = []
    for kill in range(KILLS):
        await wait_for(
            lambda: _running(engine), timeout=20, interval=0.05, what="a job to be running"
        )
        victim = rng.randrange(len(pool))
        in_flight_at_kills.append(await _running(engine))
        pool[victim].kill()
        pool[victim] = spawn_worker(f"w{victim}-after-kill-{kill}", **WORKER)
        await asyncio.sleep(rng.uniform(0.6, 1.2))
    last_kill = time.monotonic()

    done_at = await wait_all_terminal(engine, EFFECTS + INVOICES + ACCOUNTS, timeout=180)

    counts = await job_counts(engine)
    async with engine.connect() as conn:
        by_type = dict(
            (await conn.execute(select(jobs.c.type, func.count()).group_by(jobs.c.type))).all()
        )
        attempts = dict(
            (await conn.execute(select(jobs.c.id, jobs.c.attempts))).all()  # type: ignore[arg-type]
        )
        synced = {
            row.account_id: (row.status, row.items_synced)
            for row in (await conn.execute(select(accounts))).all()
        }
        stored = dict(
            (
                await conn.execute(
                    select(items.c.account_id, func.count()).group_by(items.c.account_id)
                )
            ).all()
        )
    effects = recorder.effects()
    receipts = Counter(str(message["Message-ID"]) for message in smtp.messages)
    recipients = Counter(str(message["To"]) for message in smtp.messages)

    # Every kill landed on work in flight; every job ran to success.
    assert all(n > 0 for n in in_flight_at_kills), in_flight_at_kills
    assert counts == {"succeeded": EFFECTS + INVOICES + ACCOUNTS}, counts
    assert by_type == {
        "test.effect": EFFECTS,
        "notifications.send_receipt": INVOICES,
        "sync.account": ACCOUNTS,
    }
    # Effects: each job's call made (no loss); a repeat only ever under the same key.
    assert set(effects) == effect_ids
    # Receipts: one per invoice; a resend after a kill carries the same Message-ID.
    assert len(receipts) == INVOICES
    assert set(recipients) == {f"buyer-{n}@example.com" for n in range(INVOICES)}
    # Syncs: every account's items stored once and counted once.
    assert synced == dict.fromkeys(account_ids, ("synced", PAGES * 10))
    assert stored == dict.fromkeys(account_ids, PAGES * 10)
    assert len(invoice_ids) == INVOICES

    retried = sum(1 for n in attempts.values() if n > 1)
    report(
        scenario="sigkill x20, 500 jobs, 2 workers",
        jobs=sum(counts.values()),
        succeeded=counts["succeeded"],
        lost=0,
        duplicated=0,
        redeliveries_absorbed=sum(effects.values())
        - len(effects)
        + sum(receipts.values())
        - len(receipts),
        recover_s=round(done_at - last_kill, 1),
        notes=f"jobs in flight at kills={sum(in_flight_at_kills)}, jobs re-run={retried}, "
        f"smtp raw={sum(receipts.values())}",
    )
