"""Webhooks in embedded mode, against a recording receiver on loopback: each wanted
event arrives once, signed (Standard Webhooks: the signature checks with the secret and
the timestamp is now); a failing receiver is retried, then dead-lettered, and a redrive
delivers it; URLs that are not http(s), or point at the API itself (however its
address is written, or a name that resolves to it), are refused, at registration and
at delivery."""

import asyncio
import base64
import hashlib
import hmac
import json
import socket
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI, Request, Response

from jobrail.events.feed import EventCursor
from jobrail.kernel.errors import PermanentError
from jobrail.kernel.ids import TenantId
from jobrail.webhooks.domain import Webhook
from jobrail.webhooks.persistence import SqlaWebhookStore
from jobrail.webhooks.resolving import GetaddrinfoResolver
from jobrail.webhooks.sending import HttpxWebhookSender
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
    from jobrail.runtime.app import create_app

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


def _port(receiver: Receiver) -> int:
    return httpx.URL(receiver.url).port or 80


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
    from jobrail.runtime.app import create_app

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


async def test_the_apis_own_address_is_refused_however_it_is_written(
    tmp_path: Path, receiver: Receiver
) -> None:
    """Development mode (private addresses allowed), the API listening where the
    receiver is: every spelling of that address and port is refused at registration
    with a 422 saying why, and a webhook that names it all the same (a name that
    resolves to it) is refused at delivery, which fails for good: nothing is sent."""
    from jobrail.runtime.app import create_app, runtime_of

    port = _port(receiver)
    settings = embedded_settings(
        tmp_path,
        api={"host": "127.0.0.1", "port": port},
        events={"poll_interval_ms": 50, "webhook_private_addresses": True},
        scheduler={"embedded": False},
    )
    app = create_app(await migrated(settings), modules=REFERENCE)
    client = ApiClient(transport=httpx.ASGITransport(app=app), base_url="http://api")
    client.app = app
    async with app.router.lifespan_context(app), client:
        client.sign_in_with("demo", "demo-key")
        for host in (
            "127.1",
            "0x7f000001",
            "2130706433",
            "[::ffff:127.0.0.1]",
            "0",
            "127.0.0.2",
            "0.0.0.0",
            "localhost.",
            "localhost6",
            "[::1]",
        ):
            response = await client.post("/webhooks", json={"url": f"http://{host}:{port}/hook"})
            assert response.status_code == 422, (host, response.text)
            assert "this API itself" in response.json()["error"]["message"], host

        store = await runtime_of(app).container.get(SqlaWebhookStore)
        assert await store.add(
            Webhook(
                id=uuid.uuid4(),
                tenant_id=TenantId("demo"),
                url=f"http://localhost:{port}/hook",  # /etc/hosts: 127.0.0.1
                secret="whsec_" + base64.b64encode(b"k" * 24).decode(),
                events=("succeeded",),
                created_at=datetime.now(UTC),
                start=EventCursor(0, 0),
            ),
            at_most=20,
        )
        await client.wait_status(await client.echo(), "succeeded")

        async def failed_delivery() -> dict[str, Any] | None:
            page = (await client.get("/jobs", params={"type": "webhooks.deliver"})).json()
            done = [j for j in page["items"] if j["status"] in ("failed", "succeeded")]
            return done[0] if done else None

        delivery = await wait_for(failed_delivery, timeout=20, what="the delivery to end")
        assert delivery["status"] == "failed", delivery
        assert delivery["attempts"] == 1  # for good: not retried
        assert "this API itself" in delivery["last_error"]
        assert receiver.calls == []


async def test_the_system_resolver_reads_etc_hosts() -> None:
    addresses = await GetaddrinfoResolver().addresses("localhost", 8000)
    assert addresses
    assert all(a == "::1" or a.startswith("127.") for a in addresses), addresses


async def test_a_delivery_to_a_name_resolving_to_the_api_sends_nothing(
    receiver: Receiver,
) -> None:
    port = _port(receiver)
    hook = f"http://localhost:{port}/hook"
    api_there = HttpxWebhookSender(timeout_s=5, private_ok=True, own_hosts=[("0.0.0.0", port)])
    api_elsewhere = HttpxWebhookSender(
        timeout_s=5, private_ok=True, own_hosts=[("127.0.0.1", port + 1)]
    )
    try:
        with pytest.raises(PermanentError, match="this API itself"):
            await api_there.post(hook, b"{}", {})
        assert receiver.calls == []
        assert await api_elsewhere.post(hook, b"{}", {}) == 200
        assert len(receiver.calls) == 1
    finally:
        await api_there.close()
        await api_elsewhere.close()


async def test_a_delivery_tries_the_next_checked_address_when_one_refuses(
    monkeypatch: pytest.MonkeyPatch, receiver: Receiver
) -> None:
    # The receiver listens on 127.0.0.1 only; the name's first address refuses the
    # connection (as ::1 does for a receiver on IPv4 when localhost resolves to both).
    port = _port(receiver)
    loop = asyncio.get_running_loop()
    system = loop.getaddrinfo

    async def getaddrinfo(host: str, service: int, **kwargs: Any) -> list[Any]:
        if host != "dual.test":
            return await system(host, service, **kwargs)
        return [
            (socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, service))
            for address in ("127.0.0.2", "127.0.0.1")
        ]

    monkeypatch.setattr(loop, "getaddrinfo", getaddrinfo, raising=False)
    sender = HttpxWebhookSender(timeout_s=5, private_ok=True)
    try:
        assert await sender.post(f"http://dual.test:{port}/hook", b"{}", {}) == 200
    finally:
        await sender.close()
    [(headers, _)] = receiver.calls
    assert headers["host"] == f"dual.test:{port}"


async def test_a_tenant_at_its_cap_still_gets_its_events_and_holds_back_no_other(
    api: ApiClient, receiver: Receiver
) -> None:
    from datetime import UTC, datetime, timedelta

    from jobrail.jobs.enqueue import EnqueueJob, EnqueueJobCommand
    from jobrail.kernel.ids import TenantId
    from jobrail.runtime.app import runtime_of

    admin = await api.auth("ops", admin=True)
    capped = await api.auth("capped")
    for headers in (capped, {}):
        wanted = {"url": receiver.url, "events": ["enqueued", "succeeded"]}
        created = await api.post("/webhooks", json=wanted, headers=headers)
        assert created.status_code == 201, created.text
    assert (
        await api.put("/admin/tenants/capped/max-queued", json={"max_queued": 1}, headers=admin)
    ).status_code == 200
    async with runtime_of(api.app).container() as request:  # its one place in line, taken
        waiting = await (await request.get(EnqueueJob))(
            EnqueueJobCommand(
                tenant_id=TenantId("capped"),
                type="demo.echo",
                payload={"message": "later"},
                run_after=datetime.now(UTC) + timedelta(hours=1),
            )
        )
    assert (await api.post("/demo/echo", json={"message": "x"}, headers=capped)).status_code == 429
    others = await api.echo(message="other tenant")

    async def both_delivered() -> bool:
        got = {(b["data"]["job_id"], b["data"]["event"]) for b in receiver.bodies()}
        return {(str(waiting.job.id), "enqueued"), (others, "succeeded")} <= got

    await wait_for(both_delivered, timeout=20, what="the capped tenant's and the other's events")
