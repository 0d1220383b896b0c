"""The job event feed in embedded mode: a job's events as JSON and as a stream that
ends with the job, the tenant's feed resumed with Last-Event-ID (nothing lost, nothing
twice), tenants kept apart, and bad event ids, or ids past the feed, refused."""

import asyncio
from pathlib import Path

import httpx

from tests.api.conftest import embedded_settings, migrated
from tests.support.apps import REFERENCE
from tests.support.feed import SSE, disconnect_and_resume, sse_events
from tests.support.fixtures import ApiClient
from tests.support.servers import served
from tests.support.services import wait_for


async def test_a_jobs_events_tell_its_story_in_order(api: ApiClient) -> None:
    job_id = await api.echo(sleep_ms=300, fail_times=1)
    await api.wait_status(job_id, "succeeded")

    page = (await api.get(f"/jobs/{job_id}/events")).json()

    names = [e["event"] for e in page["items"]]
    # It sleeps (reporting progress), fails once, sleeps again, then echoes.
    without_progress = [n for n in names if n != "progress"]
    assert without_progress == ["enqueued", "started", "retrying", "started", "succeeded"]
    second_start = len(names) - 1 - names[::-1].index("started")
    assert "progress" in names[2 : names.index("retrying")]
    assert "progress" in names[second_start:]
    assert all(e["job_id"] == job_id and e["job_type"] == "demo.echo" for e in page["items"])
    retrying = page["items"][names.index("retrying")]
    assert retrying["status"] == "retrying"
    assert retrying["last_error"]
    assert retrying["run_after"]
    progress = next(e for e in page["items"] if e["event"] == "progress")
    assert progress["progress"]["total"] == 300
    assert page["items"][-1]["attempts"] == 2
    assert page["last_event_id"] == page["items"][-1]["id"]
    ids = [e["id"] for e in page["items"]]
    assert len(set(ids)) == len(ids)


async def test_the_feed_filters_by_job_type_and_an_empty_one_is_no_filter(
    api: ApiClient,
) -> None:
    job_id = await api.echo()
    await api.wait_status(job_id, "succeeded")

    every = (await api.get("/events")).json()["items"]
    echoes = (await api.get("/events", params={"job_type": "demo.echo"})).json()["items"]
    empty = (await api.get("/events", params={"job_type": ""})).json()["items"]
    other = (await api.get("/events", params={"job_type": "demo.nothing"})).json()

    assert [e["event"] for e in echoes] == ["enqueued", "started", "succeeded"]
    assert {e["job_type"] for e in every} >= {"demo.echo"}
    assert empty == every
    assert other == {"items": [], "last_event_id": None}


async def test_a_jobs_stream_replays_its_history_and_ends_with_it(api: ApiClient) -> None:
    async with served(api.app) as url, httpx.AsyncClient(base_url=url, headers=api.headers) as http:
        job_id = await api.echo(sleep_ms=200)
        async with http.stream("GET", f"/jobs/{job_id}/events", headers=SSE, timeout=20) as stream:
            assert stream.status_code == 200
            assert stream.headers["content-type"].startswith("text/event-stream")
            events = [e async for e in sse_events(stream)]  # ends when the job ends

        assert events[0]["event"] == "enqueued"
        assert events[-1]["event"] == "succeeded"
        assert all(e["_sse_id"] == e["id"] for e in events)

        # Resuming after its last event: the job has ended, nothing follows.
        again = await http.get(
            f"/jobs/{job_id}/events", headers={**SSE, "Last-Event-ID": events[-1]["id"]}
        )
        assert again.status_code == 204
        # Resuming in the middle gives the rest, once.
        async with http.stream(
            "GET", f"/jobs/{job_id}/events", headers={**SSE, "Last-Event-ID": events[0]["id"]}
        ) as stream:
            rest = [e async for e in sse_events(stream)]
        assert [e["id"] for e in rest] == [e["id"] for e in events[1:]]


async def test_a_client_that_disconnects_and_resumes_loses_no_event_and_sees_none_twice(
    api: ApiClient,
) -> None:
    await disconnect_and_resume(api)


async def test_another_tenants_events_are_not_in_the_feed(api: ApiClient) -> None:
    other = await api.auth("other-tenant")
    theirs = await api.enqueue("demo.echo", {"message": "theirs"}, tenant="other-tenant")
    mine = await api.echo()
    await api.wait_status(mine, "succeeded")

    async def their_job_ended() -> bool:
        page = (await api.get(f"/jobs/{theirs}/events", headers=other)).json()
        return any(e["event"] == "succeeded" for e in page["items"])

    await wait_for(their_job_ended, timeout=15, what="the other tenant's job to succeed")
    feed = (await api.get("/events", params={"limit": 500})).json()["items"]
    assert mine in {e["job_id"] for e in feed}
    assert theirs not in {e["job_id"] for e in feed}
    assert (await api.get(f"/jobs/{theirs}/events")).status_code == 404


async def test_an_event_id_that_is_not_one_is_a_422(api: ApiClient) -> None:
    for bad in ("abc", "1-", "-1", "1-2-3", "9" * 30 + "-1", "1-" + "9" * 30, "\u0661-\u0662"):
        response = await api.get("/events", params={"after": bad})
        assert response.status_code == 422, (bad, response.text)
        assert "error" in response.json()
    response = await api.get("/events", params={"after": "9" * 70})
    assert response.status_code == 422  # longer than an id can be
    response = await api.get("/events", headers={**SSE, "Last-Event-ID": "x"})
    assert response.status_code == 422
    assert "event id" in response.json()["error"]["message"]


async def test_a_tenant_holds_at_most_its_streams_open(tmp_path: Path) -> None:
    from jobrail.runtime.app import create_app

    settings = embedded_settings(tmp_path, events={"max_streams_per_tenant": 1})
    app = create_app(await migrated(settings), modules=REFERENCE)
    async with app.router.lifespan_context(app), served(app) as url:
        keyed = {"Authorization": "Bearer demo-key", **SSE}
        async with httpx.AsyncClient(base_url=url, headers=keyed, timeout=10) as http:
            async with http.stream("GET", "/events") as first:
                assert first.status_code == 200
                lines = first.aiter_lines()  # kept: dropping it would close the stream
                assert (await anext(lines)).startswith("id:")  # the stream has started
                second = await http.get("/events")
                assert second.status_code == 429
                assert "event streams" in second.json()["error"]["message"]

            async def free_again() -> bool:
                async with http.stream("GET", "/events") as third:
                    return third.status_code == 200

            assert await wait_for(free_again, timeout=10, what="the slot to be free")


async def event_ids_past_the_feed_are_refused(api: ApiClient, past: str) -> None:
    """`past` is an id after the feed's last event: on every read of the feed, a 422
    saying so. A stream after it waited silently for the feed to reach it."""
    job_id = await api.echo(sleep_ms=5000)  # still running: its stream would follow it
    reads = [
        ("/events", {"params": {"after": past}}),
        ("/events", {"headers": {**SSE, "Last-Event-ID": past}}),
        (f"/jobs/{job_id}/events", {"params": {"after": past}}),
        (f"/jobs/{job_id}/events", {"headers": {**SSE, "Last-Event-ID": past}}),
    ]
    for path, how in reads:
        response = await asyncio.wait_for(api.get(path, **how), 20)
        assert response.status_code == 422, (path, how, response.text)
        assert "never given out" in response.json()["error"]["message"], response.text


async def test_an_event_id_past_the_feed_s_last_event_is_a_422(api: ApiClient) -> None:
    first = await api.echo()
    await api.wait_status(first, "succeeded")
    last = (await api.get("/events", params={"limit": 500})).json()["last_event_id"]
    tx, event = last.split("-")

    await event_ids_past_the_feed_are_refused(api, f"{tx}-{int(event) + 10**9}")
    assert (await api.get("/events", params={"after": last})).status_code == 200
    # An ended job's stream: past the feed is the 422 too, not the 204 that tells
    # EventSource the story is over (which its last event id gets).
    past = {**SSE, "Last-Event-ID": f"{tx}-{int(event) + 10**9}"}
    refused = await api.get(f"/jobs/{first}/events", headers=past)
    assert refused.status_code == 422, refused.text
    ended = await api.get(f"/jobs/{first}/events", headers={**SSE, "Last-Event-ID": last})
    assert ended.status_code == 204, ended.text
