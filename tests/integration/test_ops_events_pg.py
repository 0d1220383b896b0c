"""The event feed and webhooks on the ops page in stack mode (Postgres): the webhooks
section counts each tenant's webhooks and its deliveries of the last 24 hours as the jobs
table has them, links the failed ones to their jobs' pages, and shows a receiver as its
origin only; a job's page lists the events the triggers wrote, its progress folded as
its JSON events page has it. No worker runs: the
deliveries' ends are written into the jobs table by the test. (tests/api/test_ops_events.py:
the same pages on SQLite, with real deliveries.)"""

import base64
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import update
from sqlalchemy.ext.asyncio import AsyncEngine

from jobrail.jobs.enqueue import EnqueueJob
from jobrail.jobs.intake import EnqueueJobCommand
from jobrail.kernel.ids import TenantId
from jobrail.runtime.app import runtime_of
from jobrail.settings import Settings
from jobrail.store.tables import jobs
from tests.support.job_story import check_both_views_fold_its_progress, run_with_progress
from tests.support.ops_pages import rows, texts
from tests.support.rabbit import RabbitProbe

SECRET = "whsec_" + base64.b64encode(b"a-secret-of-the-pg-test!").decode()


async def test_the_ops_pages_show_webhook_deliveries_and_job_events_from_postgres(
    stack_settings: Settings,
    rabbit: RabbitProbe,
    make_api: Callable[[Settings], Any],
    engine: AsyncEngine,
) -> None:
    async with make_api(stack_settings) as api:
        admin = await api.auth("ops", admin=True)
        acme = await api.auth("acme")
        hooks = []
        for tenant in (None, None, acme):
            created = await api.post(
                "/webhooks",
                json={"url": "https://hooks.example.com:8443/in/tok_9f?key=abc", "secret": SECRET},
                headers=tenant,
            )
            assert created.status_code == 201, created.text
            hooks.append(created.json())
        assert (await api.delete(f"/webhooks/{hooks[1]['id']}")).status_code == 204

        enqueue = await runtime_of(api.app).container.get(EnqueueJob)

        async def delivery(tenant: str, hook: dict[str, Any], n: int) -> uuid.UUID:
            done = await enqueue(
                EnqueueJobCommand(
                    tenant_id=TenantId(tenant),
                    type="webhooks.deliver",
                    payload={"webhook_id": hook["id"], "event_id": f"1-{n}"},
                )
            )
            return done.job.id

        failed, succeeded, retrying, old, deleted_hooks = [
            await delivery("default", hooks[0], 1),
            await delivery("default", hooks[0], 2),
            await delivery("default", hooks[0], 3),
            await delivery("default", hooks[0], 4),
            await delivery("default", hooks[1], 5),
        ]
        theirs = await delivery("acme", hooks[2], 6)
        ended = {"finished_at": datetime.now(UTC)}
        async with engine.begin() as conn:
            for job_id, values in [
                (failed, {"status": "failed", "attempts": 8, "last_error": "answered 503"}),
                (succeeded, {"status": "succeeded", "attempts": 1}),
                (retrying, {"status": "retrying", "attempts": 2}),
                (old, {"status": "failed", "created_at": datetime.now(UTC) - timedelta(days=2)}),
                (deleted_hooks, {"status": "failed", "attempts": 8}),
                (theirs, {"status": "succeeded", "attempts": 1}),
            ]:
                await conn.execute(
                    update(jobs).where(jobs.c.id == job_id).values(**ended, **values)
                )

        overview = (await api.get("/ops", headers=admin)).text
        delivery_page = (await api.get(f"/ops/jobs/{failed}", headers=admin)).text

    assert texts(overview, "webhooks") == [
        {
            "tenant": "default",
            "webhooks": "1",
            "succeeded": "1",
            "failed": "2",
            "pending or retrying": "1",
        },
        {
            "tenant": "acme",
            "webhooks": "1",
            "succeeded": "1",
            "failed": "0",
            "pending or retrying": "0",
        },
    ]
    failures = rows(overview, "webhook-failures")  # not the one enqueued two days ago
    assert sorted(row["delivery"].links[0] for row in failures) == sorted(
        f"/ops/jobs/{job_id}" for job_id in (failed, deleted_hooks)
    )
    # A deleted webhook's receiver is still shown: the row is kept, deleted_at set.
    assert {row["receiver"].text for row in failures} == {"https://hooks.example.com:8443"}
    for hidden in (SECRET, "tok_9f", "key=abc", "/in/"):
        assert hidden not in overview
    events = texts(delivery_page, "events")
    assert [e["event"] for e in events] == ["enqueued", "failed"]
    assert events[-1]["details"] == "answered 503"
    assert events[-1]["attempts"] == "8"


async def test_a_jobs_page_and_its_events_page_fold_its_progress_alike_on_postgres(
    stack_settings: Settings,
    rabbit: RabbitProbe,
    make_api: Callable[[Settings], Any],
    engine: AsyncEngine,
) -> None:
    async with make_api(stack_settings) as api:
        admin = await api.auth("ops", admin=True)
        enqueue = await runtime_of(api.app).container.get(EnqueueJob)
        done = await enqueue(
            EnqueueJobCommand(
                tenant_id=TenantId("default"), type="demo.echo", payload={"message": "m"}
            )
        )
        await run_with_progress(engine, done.job.id)

        await check_both_views_fold_its_progress(api, done.job.id, admin)
