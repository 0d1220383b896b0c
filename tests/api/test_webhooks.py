"""Webhooks in embedded mode, against a recording receiver on loopback: each wanted
event arrives once, signed (Standard Webhooks: the signature checks with the secret and
the timestamp is now); a failing receiver is retried, then dead-lettered, and a redrive
delivers it; URLs that are not http(s), or point at the API itself, are refused."""

import base64
import hashlib
import hmac
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI, Request, Response

from tests.api.conftest import embedded_settings, migrated
from tests.support.apps import REFERENCE
from tests.support.fixtures import ApiClient
from tests.support.servers import served
from tests.support.services import wait_for


@dataclass
class Receiver:
    url: str = ""
    answer: int = 200
    calls: list[tuple[dict[str, str], bytes]] = field(default_factory=list)

    def bodies(self) -> list[dict[str, Any]]:
        return [json.loads(body) for _, body in self.calls]


def _receiver_app(receiver: Receiver) -> FastAPI:
    app = FastAPI()

    @app.post("/hook")
    async def hook(request: Request) -> Response:
        receiver.calls.append((dict(request.headers), await request.body()))
        return Response(status_code=receiver.answer)

    return app


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[ApiClient]:
    from jobrail.api.app import create_app

    settings = embedded_settings(
        tmp_path,
        events={"poll_interval_ms": 50, "webhook_private_addresses": True},
        retry={"base_s": 0.02, "cap_s": 0.2, "jitter": "none"},
        scheduler={"embedded": False},  # no housekeeping jobs: only the tests' events
    )
    app = create_app(await migrated(settings), modules=REFERENCE)
    client = ApiClient(transport=httpx.ASGITransport(app=app), base_url="http://api")
    client.app = app
    async with app.router.lifespan_context(app), client:
        yield client.sign_in_with("demo", "demo-key")


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    recorder = Receiver()
    async with served(_receiver_app(recorder)) as url:
        recorder.url = f"{url}/hook"
        yield recorder


def _verify(secret: str, headers: dict[str, str], body: bytes) -> bool:
    key = base64.b64decode(secret.removeprefix("whsec_"))
    signed = f"{headers['webhook-id']}.{headers['webhook-timestamp']}.".encode() + body
    expected = base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()
    given = [s.removeprefix("v1,") for s in headers["webhook-signature"].split()]
    return expected in given


async def test_each_wanted_event_arrives_once_signed(api: ApiClient, receiver: Receiver) -> None:
    created = await api.post(
        "/webhooks", json={"url": receiver.url, "events": ["started", "succeeded"]}
    )
    assert created.status_code == 201, created.text
    secret = created.json()["secret"]
    assert secret.startswith("whsec_")
    assert "secret" not in (await api.get("/webhooks")).json()["items"][0]

    job_ids = [await api.echo(message=f"m{i}") for i in range(3)]

    async def all_arrived() -> bool:
        wanted = {(j, e) for j in job_ids for e in ("started", "succeeded")}
        got = {(b["data"]["job_id"], b["data"]["event"]) for b in receiver.bodies()}
        return wanted <= got

    await wait_for(all_arrived, timeout=20, what="every started and succeeded event")
    ours = [b for b in receiver.bodies() if b["data"]["job_id"] in job_ids]
    assert len(ours) == 6  # once each, and no enqueued events (not asked for)
    assert {b["type"] for b in ours} == {"job.started", "job.succeeded"}
    for headers, body in receiver.calls:
        assert _verify(secret, headers, body)
        assert abs(int(headers["webhook-timestamp"]) - time.time()) < 60
        assert not _verify("whsec_" + base64.b64encode(b"x" * 24).decode(), headers, body)
    # A delivery's own events are never delivered.
    assert all(b["data"]["job_type"] != "webhooks.deliver" for b in receiver.bodies())


async def test_a_failing_receiver_is_retried_then_dead_lettered_and_redriven(
    api: ApiClient, receiver: Receiver
) -> None:
    receiver.answer = 500
    created = (await api.post("/webhooks", json={"url": receiver.url})).json()
    job_id = await api.echo()
    await api.wait_status(job_id, "succeeded")

    async def failed_delivery() -> dict[str, Any] | None:
        page = (await api.get("/jobs", params={"type": "webhooks.deliver"})).json()
        done = [j for j in page["items"] if j["status"] == "failed"]
        return done[0] if done else None

    delivery = await wait_for(failed_delivery, timeout=30, what="the delivery to fail")
    assert delivery["attempts"] == 8
    assert "500" in delivery["last_error"]
    assert len(receiver.calls) == 8
    assert len({h["webhook-id"] for h, _ in receiver.calls}) == 1  # one delivery, retried

    receiver.answer = 204
    redriven = await api.post(f"/jobs/{delivery['id']}/redrive")
    assert redriven.status_code == 202, redriven.text
    await api.wait_status(delivery["id"], "succeeded")
    assert len(receiver.calls) == 9
    headers, body = receiver.calls[-1]
    assert _verify(created["secret"], headers, body)
    assert json.loads(body)["data"]["job_id"] == job_id


async def test_a_deleted_webhook_gets_nothing_more(api: ApiClient, receiver: Receiver) -> None:
    created = (await api.post("/webhooks", json={"url": receiver.url})).json()
    assert (await api.delete(f"/webhooks/{created['id']}")).status_code == 204
    assert (await api.delete(f"/webhooks/{created['id']}")).status_code == 404
    job_id = await api.echo()
    await api.wait_status(job_id, "succeeded")
    marker = (await api.post("/webhooks", json={"url": receiver.url + "?second"})).json()
    second = await api.echo()

    async def second_arrived() -> bool:
        return any(b["data"]["job_id"] == second for b in receiver.bodies())

    await wait_for(second_arrived, timeout=20, what="the second webhook's delivery")
    assert all(b["data"]["job_id"] != job_id for b in receiver.bodies())
    assert marker["id"] != created["id"]


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("ftp://example.com/hook", "http"),
        ("file:///etc/passwd", "http"),
        ("javascript:alert(1)", "http"),
        ("http://user:pw@example.com/", "credentials"),
        ("http://api/webhook", "itself"),
        ("http://api:80/webhook", "itself"),
        ("http:///nohost", "host"),
        ("not a url", "http"),
        # Accepted once, then failed at every delivery (IDNA could not encode the name).
        ("https://" + "a" * 64 + ".com/", "host"),
        ("https://a..b.com/", "host"),
        ("https://example.com/\r\nX-Injected: 1", "control characters"),
    ],
)
async def test_a_url_that_is_not_a_webhooks_is_refused(api: ApiClient, url: str, why: str) -> None:
    response = await api.post("/webhooks", json={"url": url})
    assert response.status_code == 422, response.text
    assert why in response.json()["error"]["message"]


async def test_bad_events_and_secrets_are_refused(api: ApiClient) -> None:
    url = "https://example.com/hook"
    for body in (
        {"url": url, "events": ["exploded"]},
        {"url": url, "events": []},
        {"url": url, "secret": "short"},
        {"url": url, "secret": "whsec_" + base64.b64encode(b"x" * 8).decode()},
    ):
        response = await api.post("/webhooks", json=body)
        assert response.status_code == 422, (body, response.text)
    other = await api.auth("other-tenant")
    mine = (await api.post("/webhooks", json={"url": url})).json()
    assert (await api.get(f"/webhooks/{mine['id']}", headers=other)).status_code == 404
    assert (await api.delete(f"/webhooks/{mine['id']}", headers=other)).status_code == 404


async def test_private_addresses_are_refused_unless_allowed(tmp_path: Path) -> None:
    from jobrail.api.app import create_app

    app = create_app(await migrated(embedded_settings(tmp_path)), modules=REFERENCE)
    client = ApiClient(transport=httpx.ASGITransport(app=app), base_url="http://api")
    client.app = app
    async with app.router.lifespan_context(app), client:
        client.sign_in_with("demo", "demo-key")
        for url in (
            "http://127.0.0.1:9999/",
            "http://localhost/",
            "http://169.254.169.254/latest/meta-data",
            "http://10.0.0.8/",
            "http://[::1]:8080/",
            "http://[::ffff:127.0.0.1]/",
        ):
            response = await client.post("/webhooks", json={"url": url})
            assert response.status_code == 422, (url, response.text)
        assert (
            await client.post("/webhooks", json={"url": "https://example.com/"})
        ).status_code == 201


async def test_a_tenant_that_takes_a_deliverys_key_loses_only_that_delivery(
    api: ApiClient, receiver: Receiver, tmp_path: Path
) -> None:
    import sqlite3

    victim = await api.auth("victim")
    assert (
        await api.post(
            "/webhooks", json={"url": receiver.url, "events": ["enqueued"]}, headers=victim
        )
    ).status_code == 201
    hook = (await api.post("/webhooks", json={"url": receiver.url, "events": ["enqueued"]})).json()
    # The next event is this job's own `enqueued`: its delivery's key, taken first.
    with sqlite3.connect(tmp_path / "jobrail.db") as db:
        (last,) = db.execute("SELECT max(id) FROM job_events").fetchone()
    key = f"jobrail.webhook:{hook['id']}:0-{(last or 0) + 1}"
    squatted = await api.post("/demo/echo", json={"message": "x"}, headers={"Idempotency-Key": key})
    assert squatted.status_code == 202
    theirs = [await api.echo(headers=victim, message=f"v{i}") for i in range(3)]

    async def delivered() -> bool:
        got = {b["data"]["job_id"] for b in receiver.bodies()}
        return set(theirs) <= got

    await wait_for(delivered, timeout=20, what="the other tenant's deliveries")
    events = (await api.get(f"/jobs/{squatted.json()['job_id']}/events")).json()["items"]
    assert events[0]["id"] == key.rpartition(":")[2]  # its key was its delivery's
    assert squatted.json()["job_id"] not in {b["data"]["job_id"] for b in receiver.bodies()}


async def webhook_cap_holds_under_concurrent_registrations(api: ApiClient) -> None:
    """26 registrations at once by a tenant with none (its write limit is 30 a minute):
    20 are made, 6 refused (the count and the insert were two steps: all 26 were made)."""
    import asyncio

    answers = await asyncio.gather(
        *(api.post("/webhooks", json={"url": f"https://example.org/h{i}"}) for i in range(26))
    )

    statuses = sorted(answer.status_code for answer in answers)
    assert statuses == [201] * 20 + [409] * 6, [a.text for a in answers if a.status_code >= 500]
    refused = next(a for a in answers if a.status_code == 409)
    assert "at most 20 webhooks" in refused.json()["error"]["message"]
    assert len((await api.get("/webhooks")).json()["items"]) == 20


async def test_a_tenants_webhook_cap_holds_under_concurrent_registrations(
    api: ApiClient,
) -> None:
    await webhook_cap_holds_under_concurrent_registrations(api)
