"""Every message type delivered twice (at once, and again after the job finished), and
one event published twice: one side effect each."""

import asyncio
from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from contexts.sync.adapters.persistence import items
from jobrail.store.tables import jobs
from tests.faults.conftest import job_counts, republish_all, wait_all_terminal
from tests.support.fixtures import ApiClient
from tests.support.rabbit import RabbitProbe
from tests.support.recorder import Recorder
from tests.support.servers import RunningSandbox, SmtpSink

PAGES = 3


async def test_each_message_type_delivered_twice_has_one_effect(
    api: ApiClient,
    workers: Any,
    rabbit: RabbitProbe,
    recorder: Recorder,
    smtp: SmtpSink,
    vendor: RunningSandbox,
    engine: AsyncEngine,
    report: Any,
) -> None:
    for n in range(2):
        await workers(f"w{n}")
    invoice = (
        await api.post(
            "/billing/invoices",
            json={
                "customer_id": "c-1",
                "customer_email": "twice@example.com",
                "currency": "EUR",
                "lines": [{"description": "Plan", "quantity": 1, "unit_price_minor": 990}],
            },
        )
    ).json()
    await api.post(f"/billing/invoices/{invoice['id']}/issue")

    # One job of each type; each message published a second time right away.
    await api.enqueue("demo.echo", {"message": "once"})
    await api.enqueue("test.effect", {"url": recorder.url, "sleep_ms": 50})
    await api.enqueue("billing.pay_invoice", {"invoice_id": invoice["id"]})
    account = f"twice-pages-{PAGES}"
    await api.post(f"/sync/accounts/{account}/sync")
    first_copies = await republish_all(rabbit, engine)
    # pay_invoice publishes invoice.paid.v1: one send_receipt job, which runs too.
    await wait_all_terminal(engine, 5, timeout=30)
    async with engine.connect() as conn:
        [receipt] = (
            await conn.execute(
                select(jobs.c.id, jobs.c.payload).where(jobs.c.type == "notifications.send_receipt")
            )
        ).all()
    # The same event published a second time: another job for it, deduplicated by the
    # consumer's inbox.
    await api.enqueue("notifications.send_receipt", dict(receipt.payload))
    await wait_all_terminal(engine, 6, timeout=30)
    # Then every message once more, after its job finished.
    late_copies = await republish_all(rabbit, engine)
    await asyncio.sleep(2)  # time enough for the late copies to be consumed
    await wait_all_terminal(engine, 6, timeout=30)

    async with engine.connect() as conn:
        attempts = dict((await conn.execute(select(jobs.c.type, jobs.c.attempts))).all())
        stored = len(
            (await conn.execute(select(items.c.item_id).where(items.c.account_id == account))).all()
        )
    synced = (await api.get(f"/sync/accounts/{account}")).json()
    paid = (await api.get(f"/billing/invoices/{invoice['id']}")).json()
    vendor_calls = [c for c in vendor.state.calls if c["account_id"] == account]
    counts = await job_counts(engine)

    assert counts == {"succeeded": 6}
    assert attempts == {
        "demo.echo": 1,
        "test.effect": 1,
        "billing.pay_invoice": 1,
        "notifications.send_receipt": 1,
        "sync.account": 1,
    }
    assert len(recorder.calls) == 1
    assert len(smtp.messages) == 1
    assert smtp.messages[0]["To"] == "twice@example.com"
    assert paid["status"] == "paid"
    assert len(vendor_calls) == PAGES
    assert (synced["items_synced"], stored) == (PAGES * 10, PAGES * 10)
    report(
        scenario="every message type twice (+ one event twice)",
        jobs=sum(counts.values()),
        succeeded=counts["succeeded"],
        lost=0,
        duplicated=0,
        redeliveries_absorbed=first_copies + late_copies + 1,
        recover_s=0,
        notes="types: demo.echo, test.effect, billing.pay_invoice, "
        "notifications.send_receipt, sync.account",
    )
