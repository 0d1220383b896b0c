"""The console's job list, a job's page and its actions, in embedded mode (SQLite, the
in-process worker, the in-memory DLQ), through the ASGI app as a signed-in browser:
filters, search and keyset pages; payload, result and each attempt's error; every action
confirmed first, refused without its CSRF token, and checked in the database after.
(tests/integration/test_ops_jobs_pg.py: the list's query plans on Postgres;
tests/e2e/test_ops_console_browser.py: the same in Chromium.)"""

import json
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from jobrail.ops.dead_letters import ListDeadLetters
from jobrail.runtime.app import runtime_of
from jobrail.store.tables import dispatch_pauses, job_events, jobs
from tests.support.console import Console, console
from tests.support.ops_pages import fields, has_table, rows, texts
from tests.support.services import wait_for

DEMO = {"Authorization": "Bearer demo-key"}


@pytest.fixture
async def ops(tmp_path: Path) -> AsyncIterator[Console]:
    async with console(tmp_path) as running:
        yield running


def _listed(page: str) -> list[str]:
    return [row["job"].links[0].rsplit("/", 1)[1] for row in rows(page, "job-list")]


async def _status(engine: AsyncEngine, job_id: Any) -> str:
    async with engine.connect() as conn:
        status: str = await conn.scalar(
            select(jobs.c.status).where(jobs.c.id == uuid.UUID(str(job_id)))
        )
    return status


async def _events(engine: AsyncEngine, job_id: Any) -> list[str]:
    query = select(job_events.c.name).where(job_events.c.job_id == uuid.UUID(str(job_id)))
    async with engine.connect() as conn:
        return list((await conn.execute(query.order_by(job_events.c.id))).scalars())


async def _echo(ops: Console, query: str = "", **payload: Any) -> str:
    payload.setdefault("message", "hello")
    response = await ops.browser.post(f"/demo/echo{query}", json=payload, headers=DEMO)
    assert response.status_code == 202, response.text
    job_id: str = response.json()["job_id"]
    return job_id


async def _until_status(ops: Console, job_id: str, *statuses: str) -> None:
    async def reached() -> bool:
        return await _status(ops.engine, job_id) in statuses

    await wait_for(reached, timeout=20, what=f"job {job_id} to be {'/'.join(statuses)}")


async def test_the_job_list_filters_by_status_type_tenant_entity_queue_and_creation_time(
    ops: Console,
) -> None:
    t0 = datetime(2026, 12, 1, tzinfo=UTC)
    failed, other_type, acme, high, old, order = await ops.add_jobs(
        {"status": "failed", "created_at": t0 + timedelta(hours=1)},
        {"type": "sync.account", "created_at": t0 + timedelta(hours=2)},
        {"tenant_id": "acme", "created_at": t0 + timedelta(hours=3)},
        {"queue": "jobs.high", "created_at": t0 + timedelta(hours=4)},
        {"created_at": t0 - timedelta(days=30)},
        {"tenant_id": "acme", "entity_id": "order-7", "created_at": t0 + timedelta(hours=5)},
    )

    async def listed(**params: str) -> set[str]:
        return set(_listed(await ops.page("/ops/jobs", **params)))

    assert await listed(status="failed") == {str(failed)}
    assert await listed(type="sync.account") == {str(other_type)}
    assert await listed(tenant="acme") == {str(acme), str(order)}
    assert await listed(tenant="acme", entity="order-7") == {str(order)}
    assert await listed(tenant="demo", entity="order-7") == set()
    assert await listed(queue="jobs.high") == {str(high)}
    assert await listed(created_to="2026-12-01", tenant="demo") == {str(old)}
    assert await listed(created_from="2026-12-01T02:30", created_to="2026-12-01T03:30") == {
        str(acme)
    }
    assert await listed(status="failed", tenant="acme") == set()
    everything = await listed(created_to="2026-12-02")
    assert everything == {str(j) for j in (failed, other_type, acme, high, old, order)}
    assert "No job matches." in await ops.page("/ops/jobs", tenant="nobody")


async def test_the_job_list_pages_by_keyset_newest_first_through_ties(ops: Console) -> None:
    t0 = datetime(2026, 12, 1, tzinfo=UTC)
    # 120 jobs, three to each instant: the pages must split ties without losing any.
    ids = await ops.add_jobs(*({"created_at": t0 + timedelta(seconds=n // 3)} for n in range(120)))
    expected = [str(i) for _, i in sorted(((n // 3, i) for n, i in enumerate(ids)), reverse=True)]
    shown: list[str] = []
    page = await ops.page("/ops/jobs", tenant="demo")
    pages = 1
    while "id=next-page" in page:
        shown += _listed(page)
        page = await ops.page(_next_link(page))
        pages += 1
    shown += _listed(page)

    assert pages == 3
    assert shown == expected


def _next_link(page: str) -> str:
    import html
    import re

    match = re.search(r'<a href="([^"]+)" id=next-page>', page)
    assert match, page
    return html.unescape(match.group(1))


async def test_the_job_list_keeps_its_filters_from_page_to_page(ops: Console) -> None:
    t0 = datetime(2026, 12, 1, tzinfo=UTC)
    await ops.add_jobs(*({"created_at": t0 + timedelta(seconds=n)} for n in range(60)))
    failed = await ops.add_jobs(
        *({"status": "failed", "created_at": t0 + timedelta(seconds=n)} for n in range(55))
    )

    first = await ops.page("/ops/jobs", status="failed", tenant="demo")
    second = await ops.page(_next_link(first))

    assert len(_listed(first)) == 50
    assert len(_listed(second)) == 5
    assert set(_listed(first) + _listed(second)) == {str(i) for i in failed}
    assert "id=next-page" not in second


async def test_the_search_finds_a_job_by_id_idempotency_key_or_unique_key(ops: Console) -> None:
    by_id, by_key, by_unique, _other = await ops.add_jobs(
        {},
        {"idempotency_key": "order-42", "tenant_id": "acme"},
        {"unique_key": "render:u1"},
        {"idempotency_key": "order-43"},
    )

    for q, expected in ((str(by_id), by_id), ("order-42", by_key), ("render:u1", by_unique)):
        assert _listed(await ops.page("/ops/jobs", q=q)) == [str(expected)]
    assert _listed(await ops.page("/ops/jobs", q=str(uuid.uuid4()))) == []


@pytest.mark.parametrize(
    ("params", "said"),
    [
        ({"status": "exploded"}, "status is one of pending"),
        ({"created_from": "yesterday"}, "created_from is a time"),
        ({"created_to": "2026-13-45"}, "created_to is a time"),
        ({"created_from": "2026-12-02", "created_to": "2026-12-01"}, "must be before"),
        ({"cursor": "not-a-cursor"}, "not a cursor"),
        ({"cursor": "MjAyNi0xMi0wMXx4"}, "not a cursor"),  # base64 of a time and no id
        ({"tenant": "t" * 300}, "at most 255"),
        ({"entity": "order-7"}, "give the tenant too"),
    ],
)
async def test_bad_list_input_is_a_400_page_that_says_what_is_wrong(
    ops: Console, params: dict[str, str], said: str
) -> None:
    response = await ops.browser.get("/ops/jobs", params=params)

    assert response.status_code == 400
    assert said in response.text
    assert "id=problem" in response.text
    assert not has_table(response.text, "job-list")


async def test_a_jobs_page_shows_its_payload_result_and_each_attempts_error(
    ops: Console,
) -> None:
    job_id = await _echo(ops, message="<b>hi</b>", fail_times=1)
    await _until_status(ops, job_id, "succeeded")

    page = await ops.page(f"/ops/jobs/{job_id}")

    payload = page.split("<pre id=payload>", 1)[1].split("</pre>", 1)[0]
    assert "&lt;b&gt;hi&lt;/b&gt;" in payload
    assert "<b>" not in payload
    assert (
        json.loads(payload.replace("&lt;", "<").replace("&gt;", ">").replace("&#34;", '"'))[
            "message"
        ]
        == "<b>hi</b>"
    )
    assert "<pre id=result>" in page
    attempts = texts(page, "attempts")
    assert [a["#"] for a in attempts] == ["1", "2"]
    assert [a["outcome"] for a in attempts] == ["failed, retried", "succeeded"]
    assert "asked to fail" in attempts[0]["error"]
    assert attempts[1]["error"] == ""
    assert fields(page, "job")["status"].text.strip() == "succeeded"
    assert "hx-trigger" not in page  # it has ended: nothing to refresh
    assert 'id="redrive"' not in page
    assert 'id="cancel"' not in page


async def test_a_waiting_jobs_page_says_what_it_waits_for_and_refreshes_its_live_part(
    ops: Console,
) -> None:
    job_id = await _echo(ops, "?delay=600")

    page = await ops.page(f"/ops/jobs/{job_id}")
    live = await ops.browser.get(f"/ops/jobs/{job_id}", headers={"HX-Request": "true"})

    waiting = page.split("<pre id=waiting>", 1)[1].split("</pre>", 1)[0]
    assert "&#34;reason&#34;: &#34;run_at&#34;" in waiting
    assert 'hx-trigger="every 5s"' in page
    assert live.status_code == 200
    assert live.text.lstrip().startswith("<div id=live")
    assert "<html" not in live.text
    assert "id=sign-out" not in live.text
    assert has_table(live.text, "job")


async def test_redriving_a_failed_job_asks_first_and_wants_the_csrf_token(ops: Console) -> None:
    job_id = await _echo(ops, permanent=True)
    await _until_status(ops, job_id, "failed")
    assert 'id="redrive"' in await ops.page(f"/ops/jobs/{job_id}")
    path = f"/ops/jobs/{job_id}/redrive"

    unconfirmed = await ops.act(path, confirm=False)
    without_token = await ops.act(path, csrf=False)
    cross_site = await ops.browser.post(
        path,
        data={"csrf_token": ops.csrf, "confirm": "yes"},
        headers={"Sec-Fetch-Site": "cross-site"},
    )
    assert unconfirmed.status_code == 200
    assert "id=question" in unconfirmed.text
    assert "name=confirm value=yes" in unconfirmed.text
    assert without_token.status_code == cross_site.status_code == 403
    assert await _status(ops.engine, job_id) == "failed"
    assert "redriven" not in await _events(ops.engine, job_id)

    done = await ops.act(path)

    assert done.status_code == 303
    assert done.headers["location"] == f"/ops/jobs/{job_id}?note=redriven"
    assert "redriven" in await _events(ops.engine, job_id)
    assert "Redriven: the job runs again." in await ops.page(done.headers["location"])


async def test_redriving_a_job_that_has_not_failed_says_why_and_changes_nothing(
    ops: Console,
) -> None:
    [job_id] = await ops.add_jobs({})

    refused = await ops.act(f"/ops/jobs/{job_id}/redrive")

    assert refused.status_code == 409
    assert "id=problem" in refused.text
    assert await _status(ops.engine, job_id) == "succeeded"


async def test_cancelling_a_pending_job_asks_first_and_ends_it_cancelled(ops: Console) -> None:
    job_id = await _echo(ops, "?delay=600")
    path = f"/ops/jobs/{job_id}/cancel"
    assert 'id="cancel"' in await ops.page(f"/ops/jobs/{job_id}")

    unconfirmed = await ops.act(path, confirm=False)
    without_token = await ops.act(path, csrf=False)
    assert unconfirmed.status_code == 200
    assert "id=confirm" in unconfirmed.text
    assert without_token.status_code == 403
    assert await _status(ops.engine, job_id) == "pending"

    done = await ops.act(path)

    assert done.status_code == 303
    assert done.headers["location"].endswith("?note=cancelled")
    assert await _status(ops.engine, job_id) == "cancelled"
    assert "cancelled" in await _events(ops.engine, job_id)


async def test_the_dlq_page_lists_redrives_and_purges_dead_letters(ops: Console) -> None:
    first, second = [await _echo(ops, permanent=True) for _ in range(2)]
    for job_id in (first, second):
        await _until_status(ops, job_id, "failed")
    letters = await runtime_of(ops.app).container.get(ListDeadLetters)

    async def letters_are(count: int) -> bool:
        # A job's dead letter goes out after its failure is recorded, not with it.
        return len(await letters(10)) == count

    await wait_for(lambda: letters_are(2), what="two dead letters")

    page = await ops.page("/ops/dlq")
    listed = rows(page, "dead-letters")
    assert sorted(row["job"].links[0].rsplit("/", 1)[1] for row in listed) == sorted(
        [first, second]
    )
    [letter] = [letter for letter in await letters(10) if str(letter.job_id) == first]

    asked = await ops.act("/ops/dlq/redrive", confirm=False, id=letter.id)
    refused = await ops.act("/ops/dlq/redrive", csrf=False, id=letter.id)
    assert asked.status_code == 200
    assert "id=confirm" in asked.text
    assert refused.status_code == 403
    assert "redriven" not in await _events(ops.engine, first)

    redriven = await ops.act("/ops/dlq/redrive", id=letter.id)

    assert redriven.status_code == 303
    assert redriven.headers["location"] == "/ops/dlq?note=redriven&n=1"
    assert "redriven" in await _events(ops.engine, first)
    assert "redriven" not in await _events(ops.engine, second)
    await _until_status(ops, first, "failed")  # permanent: it fails again, a new letter

    asked = await ops.act("/ops/dlq/purge", confirm=False, all="yes")
    refused = await ops.act("/ops/dlq/purge", csrf=False, all="yes")
    assert asked.status_code == 200
    assert "Purge every dead letter?" in asked.text
    assert refused.status_code == 403
    await wait_for(lambda: letters_are(2), what="the redriven job's new letter")

    purged = await ops.act("/ops/dlq/purge", all="yes")

    assert purged.status_code == 303
    assert purged.headers["location"] == "/ops/dlq?note=purged&n=2"
    assert await letters(10) == []
    assert await _status(ops.engine, second) == "failed"  # its job stays failed
    assert "id=dlq-empty" in await ops.page("/ops/dlq")


async def test_the_queues_page_pauses_and_resumes_a_queue(ops: Console) -> None:
    async def paused() -> list[tuple[str, str]]:
        async with ops.engine.connect() as conn:
            found = await conn.execute(select(dispatch_pauses.c.scope, dispatch_pauses.c.value))
            return [(s, v) for s, v in found.all()]

    page = await ops.page("/ops/queues")
    assert 'id="pause-jobs.default"' in page

    asked = await ops.act("/ops/queues/pause", confirm=False, scope="queue", value="jobs.default")
    refused = await ops.act("/ops/queues/pause", csrf=False, scope="queue", value="jobs.default")
    assert asked.status_code == 200
    assert "id=confirm" in asked.text
    assert refused.status_code == 403
    assert await paused() == []

    before = await ops.browser.get("/ops/queues", headers={"HX-Request": "true"})
    done = await ops.act("/ops/queues/pause", scope="queue", value="jobs.default")
    assert done.status_code == 303
    assert await paused() == [("queue", "jobs.default")]
    assert 'id="resume-jobs.default"' in await ops.page("/ops/queues")
    # The page refreshes its table by fragment: the next refresh shows the pause.
    after = await ops.browser.get("/ops/queues", headers={"HX-Request": "true"})
    for live in (before, after):
        assert live.text.startswith("<div id=live")
        assert "<html" not in live.text
        assert 'hx-trigger="every 5s"' in live.text
    assert 'id="pause-jobs.default"' in before.text
    assert 'id="resume-jobs.default"' in after.text

    typo = await ops.act("/ops/queues/pause", scope="queue", value="jobs.nope")
    assert typo.status_code == 400
    assert "no queue" in typo.text

    resumed = await ops.act("/ops/queues/resume", scope="queue", value="jobs.default")
    assert resumed.status_code == 303
    assert await paused() == []


@pytest.mark.parametrize(
    "path",
    ["/ops/jobs", "/ops/dlq", "/ops/queues", "/ops/static/console.css"],
)
async def test_the_new_pages_want_an_admin_and_the_static_files_do_not(
    ops: Console, path: str
) -> None:
    ops.browser.cookies.clear()

    response = await ops.browser.get(path)

    if path.startswith("/ops/static"):
        assert response.status_code == 200
        assert "text/css" in response.headers["content-type"]
    else:
        assert response.status_code == 401
        assert "name=api_key" in response.text


async def test_htmx_is_served_from_the_package(ops: Console) -> None:
    response = await ops.browser.get("/ops/static/htmx.min.js")

    assert response.status_code == 200
    assert "javascript" in response.headers["content-type"]
    assert response.text.startswith("var htmx=function()")
