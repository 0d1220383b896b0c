"""Reading the job event feed's SSE streams in tests, and the resume scenario both
modes run."""

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx

from tests.support.fixtures import ApiClient
from tests.support.servers import served

SSE = {"Accept": "text/event-stream"}


async def sse_events(response: httpx.Response) -> AsyncIterator[dict[str, Any]]:
    """The events of an SSE response, each with its SSE id (comments skipped, and the
    named frames that are no events of the feed: a job stream's `waiting`)."""
    async for name, event in sse_frames(response):
        if name is None:
            yield event


async def sse_frames(response: httpx.Response) -> AsyncIterator[tuple[str | None, Any]]:
    """Every frame with data of an SSE response: its name (its `event:`, None for the
    feed's events) and its data, parsed (with its SSE id as `_sse_id`, if a dict)."""
    data: list[str] = []
    event_id = name = None
    async for line in response.aiter_lines():
        if line.startswith("data:"):
            data.append(line[5:].strip())
        elif line.startswith("id:"):
            event_id = line[3:].strip()
        elif line.startswith("event:"):
            name = line[6:].strip()
        elif line == "":  # a frame ends: its fields were its own
            if data:
                event = json.loads("\n".join(data))
                if isinstance(event, dict):
                    event["_sse_id"] = event_id
                yield name, event
            data, event_id, name = [], None, None


async def disconnect_and_resume(api: ApiClient, jobs: int = 5, timeout: float = 30) -> None:
    """A client follows GET /events, goes away after a few events while jobs run and
    more are enqueued, and resumes with Last-Event-ID until every job has ended: what it
    saw, in order, is exactly the feed's history of those jobs (nothing lost, nothing
    twice)."""
    start = (await api.get("/events", params={"limit": 500})).json()["last_event_id"]
    seen: list[dict[str, Any]] = []
    first = [await api.echo(message=f"a{i}", sleep_ms=20) for i in range(jobs)]
    async with served(api.app) as url, httpx.AsyncClient(base_url=url, headers=api.headers) as http:
        headers = {**SSE, "Last-Event-ID": start or "0-0"}
        async with http.stream("GET", "/events", headers=headers, timeout=timeout) as stream:
            assert stream.status_code == 200
            async for event in sse_events(stream):
                seen.append(event)
                if len(seen) == jobs + 2:
                    break  # the client goes away mid-feed
        second = [await api.echo(message=f"b{i}", sleep_ms=20) for i in range(jobs)]
        ours = set(first + second)
        for job_id in ours:
            await api.wait_status(job_id, "succeeded", timeout=timeout)

        ended = {e["job_id"] for e in seen if e["event"] == "succeeded"}
        headers = {**SSE, "Last-Event-ID": seen[-1]["id"]}
        async with http.stream("GET", "/events", headers=headers, timeout=timeout) as stream:
            async for event in sse_events(stream):
                seen.append(event)
                if event["event"] == "succeeded":
                    ended.add(event["job_id"])
                if ended >= ours:
                    break

    history = (await api.get("/events", params={"after": start or "0-0", "limit": 500})).json()
    expected = [e["id"] for e in history["items"] if e["job_id"] in ours]
    got = [e["id"] for e in seen if e["job_id"] in ours]
    assert got == expected  # every event, in order, none twice
    assert len(got) == len(set(got))
    assert all(e["_sse_id"] == e["id"] for e in seen)
    names = [e["event"] for e in seen if e["job_id"] in ours]
    assert names.count("enqueued") == names.count("succeeded") == 2 * jobs
