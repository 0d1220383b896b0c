"""The job event feed in the stack (Postgres, RabbitMQ, worker processes): a client that
disconnects and resumes with Last-Event-ID while two workers run its 24 jobs loses no
event and sees none twice (24: the stack's enqueue limit is 30 a minute); an event id
past the feed is refused."""

from collections.abc import Callable
from typing import Any

from tests.api.test_event_feed import event_ids_past_the_feed_are_refused
from tests.support.feed import disconnect_and_resume
from tests.support.fixtures import ApiClient
from tests.support.services import wait_for


async def test_a_resumed_stream_loses_nothing_while_workers_write_concurrently(
    api: ApiClient, workers: Callable[..., Any]
) -> None:
    await workers("worker-1")
    await workers("worker-2")
    await disconnect_and_resume(api, jobs=12, timeout=60)


async def test_an_event_id_past_the_feed_s_horizon_is_a_422(api: ApiClient) -> None:
    # On Postgres an id's first part is its transaction's order: past the horizon of
    # the transactions still running, no event had it yet.
    await api.echo()

    async def last_event_id() -> str | None:
        page = (await api.get("/events", params={"limit": 500})).json()
        return page["last_event_id"]  # type: ignore[no-any-return]

    last = await wait_for(last_event_id, timeout=15, what="the enqueued event")
    tx, event = last.split("-")

    await event_ids_past_the_feed_are_refused(api, f"{int(tx) + 10**9}-{event}")
    assert (await api.get("/events", params={"after": last})).status_code == 200
