"""Webhooks in the stack: two worker processes (two webhook relays taking turns on
Postgres) deliver each wanted event exactly once, signed; a receiver that keeps failing
is retried and its delivery ends in RabbitMQ's dead-letter queue."""

import base64
import hashlib
import hmac
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from fastapi import FastAPI, Request, Response

from tests.api.test_webhooks import webhook_cap_holds_under_concurrent_registrations
from tests.support.fixtures import ApiClient, settings_from
from tests.support.rabbit import RabbitProbe
from tests.support.servers import served
from tests.support.services import wait_for


@pytest.fixture
def webhook_env(stack_env: dict[str, str]) -> dict[str, str]:
    return {
        **stack_env,
        "JOBRAIL_EVENTS__POLL_INTERVAL_MS": "100",
        "JOBRAIL_EVENTS__WEBHOOK_PRIVATE_ADDRESSES": "true",  # the receiver is on loopback
        "JOBRAIL_RETRY__BASE_S": "0.02",
        "JOBRAIL_RETRY__CAP_S": "0.2",
    }


@pytest.fixture
def worker_env(webhook_env: dict[str, str]) -> dict[str, str]:
    return webhook_env


@pytest.fixture
async def api(
    webhook_env: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
    make_api: Callable[..., Any],
    rabbit: RabbitProbe,
) -> AsyncIterator[ApiClient]:
    async with make_api(settings_from(webhook_env, monkeypatch)) as client:
        yield client


class Receiver:
    def __init__(self) -> None:
        self.answer = 200
        self.calls: list[tuple[dict[str, str], bytes]] = []
        self.app = FastAPI()

        @self.app.post("/hook")
        async def hook(request: Request) -> Response:
            self.calls.append((dict(request.headers), await request.body()))
            return Response(status_code=self.answer)


def _signed(secret: str, headers: dict[str, str], body: bytes) -> bool:
    key = base64.b64decode(secret.removeprefix("whsec_"))
    signed = f"{headers['webhook-id']}.{headers['webhook-timestamp']}.".encode() + body
    digest = base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()
    return headers["webhook-signature"] == f"v1,{digest}"


async def test_two_relays_deliver_each_event_once(
    api: ApiClient, workers: Callable[..., Any]
) -> None:
    receiver = Receiver()
    async with served(receiver.app) as url:
        created = await api.post("/webhooks", json={"url": f"{url}/hook"})
        assert created.status_code == 201, created.text
        secret = created.json()["secret"]
        await workers("worker-1")
        await workers("worker-2")
        job_ids = [await api.echo(message=f"m{i}") for i in range(12)]

        async def all_delivered() -> bool:
            got = {json.loads(body)["data"]["job_id"] for _, body in receiver.calls}
            return set(job_ids) <= got

        await wait_for(all_delivered, timeout=60, what="a delivery for every job")
        for job_id in job_ids:  # the deliveries are jobs too: let them all finish
            await api.wait_status(job_id, "succeeded")
        page = (await api.get("/jobs", params={"type": "webhooks.deliver", "limit": 200})).json()
        for delivery in page["items"]:
            await api.wait_status(delivery["id"], "succeeded", timeout=30)

    events = [json.loads(body)["data"] for _, body in receiver.calls]
    assert sorted(e["job_id"] for e in events) == sorted(job_ids)  # once each
    assert {e["event"] for e in events} == {"succeeded"}  # the default: how jobs ended
    assert len({h["webhook-id"] for h, _ in receiver.calls}) == len(job_ids)
    assert all(_signed(secret, h, b) for h, b in receiver.calls)
    assert len(page["items"]) == len(job_ids)


async def test_a_failing_receivers_delivery_is_dead_lettered(
    api: ApiClient, workers: Callable[..., Any], rabbit: RabbitProbe
) -> None:
    receiver = Receiver()
    receiver.answer = 503
    async with served(receiver.app) as url:
        assert (await api.post("/webhooks", json={"url": f"{url}/hook"})).status_code == 201
        await workers()
        job_id = await api.echo()
        await api.wait_status(job_id, "succeeded")

        async def failed() -> dict[str, Any] | None:
            page = (await api.get("/jobs", params={"type": "webhooks.deliver"})).json()
            done = [j for j in page["items"] if j["status"] == "failed"]
            return done[0] if done else None

        delivery = await wait_for(failed, timeout=60, what="the delivery to be dead-lettered")

    assert delivery["attempts"] == 8
    assert "503" in delivery["last_error"]
    assert len(receiver.calls) == 8

    async def dead_lettered() -> bool:
        ready, _ = await rabbit.depth(rabbit.topology.dead_letter_queue)
        return ready >= 1

    await wait_for(dead_lettered, timeout=15, what="the delivery's dead letter")
    letters = await rabbit.drain(rabbit.topology.dead_letter_queue)
    assert any(delivery["id"].encode() in letter.body for letter in letters)


async def test_a_tenants_webhook_cap_holds_under_concurrent_registrations(api: ApiClient) -> None:
    # On Postgres the count and the insert of two requests would interleave: each
    # tenant's registrations take turns on an advisory lock.
    await webhook_cap_holds_under_concurrent_registrations(api)
