"""A full scenario in stack mode, then a search of everything it wrote and published for
the API keys and the database password: none may appear anywhere."""

import asyncio
import json
import os
import subprocess
import time
from collections.abc import AsyncIterator, Iterator

import aio_pika
import httpx
import pytest
from sqlalchemy import select, text
from sqlalchemy.ext.asyncio import AsyncEngine

from jobrail.store.tables import jobs, outbox
from tests.support.processes import BIN, ROOT, Process, start_worker
from tests.support.rabbit import RabbitProbe
from tests.support.servers import free_port, sandbox_vendor, smtp_server
from tests.support.services import AMQP_URL, wait_for

DB_PASSWORD = "Pg-s3cret-4c9e1f"  # Postgres here trusts local users: any password works


@pytest.fixture
def secret_env(stack_env: dict[str, str]) -> Iterator[dict[str, str]]:
    url = stack_env["JOBRAIL_DATABASE__URL"].replace("postgres@", f"postgres:{DB_PASSWORD}@")
    assert DB_PASSWORD in url
    with smtp_server() as smtp, sandbox_vendor(rate_per_s=500) as vendor:
        yield {
            **stack_env,
            "JOBRAIL_DATABASE__URL": url,
            "JOBRAIL_LOG_LEVEL": "DEBUG",
            "JOBRAIL_NOTIFICATIONS__EMAIL_BACKEND": "smtp",
            "JOBRAIL_NOTIFICATIONS__SMTP_PORT": str(smtp.port),
            "JOBRAIL_SYNC__VENDOR_BASE_URL": vendor.url,
            "JOBRAIL_SYNC__SANDBOX": "false",
            "JOBRAIL_RETRY__MAX_ATTEMPTS": "2",
        }


def _jobrail(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if not k.startswith("JOBRAIL_")}
    return subprocess.run(
        [str(BIN / "jobrail"), *args],
        cwd=ROOT,
        env={**full, **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.fixture
async def tap(rabbit: RabbitProbe) -> AsyncIterator[aio_pika.abc.AbstractQueue]:
    """A queue that gets a copy of every message published to jobrail's exchanges."""
    connection = await aio_pika.connect(AMQP_URL)
    channel = await connection.channel()
    topology = rabbit.topology
    work = await channel.declare_exchange(
        topology.exchange, aio_pika.ExchangeType.DIRECT, durable=True
    )
    delay = await channel.declare_exchange(
        topology.delay_exchange, aio_pika.ExchangeType.HEADERS, durable=True
    )
    queue = await channel.declare_queue(f"{topology.exchange}.tap", exclusive=True)
    for name in [*topology.queues.values(), topology.dead_letter_queue]:
        await queue.bind(work, routing_key=name)
    await queue.bind(delay, arguments={})  # no headers to match: every message
    yield queue
    await connection.close()


async def test_no_api_key_or_database_password_in_logs_or_messages(
    secret_env: dict[str, str],
    tap: aio_pika.abc.AbstractQueue,
    rabbit: RabbitProbe,
    engine: AsyncEngine,
) -> None:
    created = [_jobrail(secret_env, "tenants", "create", name) for name in ("acme", "globex")]
    admin = _jobrail(secret_env, "tenants", "create", "ops", "--admin")
    keys = [json.loads(done.stdout)["api_key"] for done in [*created, admin]]
    wrong_key = "jr_this-key-was-never-issued-0123456789"
    port = free_port()
    api = Process(
        [str(BIN / "jobrail"), "api"], {**secret_env, "JOBRAIL_API__PORT": str(port)}, "api"
    )
    worker = start_worker(secret_env, name="worker")
    failures = [
        # Start-up failures print what was wrong, never the URL.
        _jobrail({**secret_env, "JOBRAIL_API__PORT": "not-a-port"}, "api"),
        _jobrail(
            {
                **secret_env,
                "JOBRAIL_DATABASE__URL": f"postgresql+asyncpg://postgres:{DB_PASSWORD}"
                "@127.0.0.1:1/nowhere",
            },
            "migrate",
        ),
    ]
    try:
        base = f"http://127.0.0.1:{port}"
        acme, globex, ops = ({"Authorization": f"Bearer {key}"} for key in keys)
        async with httpx.AsyncClient(base_url=base, timeout=10) as client:

            async def api_ready() -> bool:
                assert api.alive(), api.output()[-2000:]
                try:
                    return (await client.get("/ready")).status_code == 200
                except httpx.HTTPError:
                    return False

            await wait_for(api_ready, timeout=60, interval=0.2, what="the API")
            statuses = await _scenario(client, acme, globex, ops, wrong_key)

            async def all_done() -> bool:
                async with engine.connect() as conn:
                    left = await conn.scalar(
                        text(
                            "SELECT count(*) FROM jobs WHERE status NOT IN ('succeeded', 'failed')"
                        )
                    )
                return left == 0

            await wait_for(all_done, timeout=60, interval=0.2, what="every job to finish")
    finally:
        api.stop()
        worker.stop()

    published = await _drain(tap)
    dead = await rabbit.drain(rabbit.topology.dead_letter_queue)
    async with engine.connect() as conn:
        stored_messages = (await conn.execute(select(outbox.c.body, outbox.c.headers))).all()
        job_rows = (
            await conn.execute(select(jobs.c.payload, jobs.c.result, jobs.c.last_error))
        ).all()
    places = {
        "api log": api.output(),
        "worker log": worker.output(),
        "cli stderr": "".join(done.stderr for done in [*created, admin]),
        "start-up failures": "".join(done.stdout + done.stderr for done in failures),
        "published messages": "\n".join(published),
        "dead letters": "\n".join(f"{d.body!r} {d.headers!r}" for d in dead),
        "outbox rows": "\n".join(f"{b!r} {h!r}" for b, h in stored_messages),
        "job rows": "\n".join(repr(tuple(row)) for row in job_rows),
    }

    # The scenario did what it should, and the places searched hold what they should:
    assert statuses == {
        "echo": 202,
        "fail": 202,
        "invoice": 201,
        "pay": 200,
        "sync": 202,
        "wrong key": 401,
        "other tenant": 404,
        "not admin": 403,
        "redrive": 202,
    }
    assert all(done.returncode == 0 for done in [*created, admin])
    assert [done.returncode for done in failures] == [2, 1]
    assert len(published) >= 6  # echo, fail + its dead letter, receipt, sync, redrive
    assert len(dead) >= 1
    assert len(places["api log"].splitlines()) > 3
    assert len(places["worker log"].splitlines()) > 20
    # The search itself works: the CLI's stdout is where a key is meant to be shown.
    assert keys[0] in created[0].stdout
    for place, content in places.items():
        for secret in [*keys, wrong_key, DB_PASSWORD]:
            assert secret not in content, f"a secret ({secret[:6]}…) is in the {place}"


async def _scenario(
    client: httpx.AsyncClient,
    acme: dict[str, str],
    globex: dict[str, str],
    ops: dict[str, str],
    wrong_key: str,
) -> dict[str, int]:
    statuses: dict[str, int] = {}
    echo = await client.post("/demo/echo", json={"message": "hello"}, headers=acme)
    statuses["echo"] = echo.status_code
    fail = await client.post("/demo/echo", json={"message": "x", "permanent": True}, headers=acme)
    statuses["fail"] = fail.status_code
    invoice = await client.post(
        "/billing/invoices",
        json={
            "customer_id": "c-1",
            "customer_email": "ada@example.com",
            "currency": "EUR",
            "lines": [{"description": "Plan", "quantity": 1, "unit_price_minor": 900}],
        },
        headers=acme,
    )
    statuses["invoice"] = invoice.status_code
    invoice_id = invoice.json()["id"]
    await client.post(f"/billing/invoices/{invoice_id}/issue", headers=acme)
    statuses["pay"] = (
        await client.post(f"/billing/invoices/{invoice_id}/pay", headers=acme)
    ).status_code
    statuses["sync"] = (
        await client.post("/sync/accounts/secret-pages-2/sync", headers=acme)
    ).status_code
    statuses["wrong key"] = (
        await client.get("/jobs", headers={"Authorization": f"Bearer {wrong_key}"})
    ).status_code
    statuses["other tenant"] = (
        await client.get(f"/jobs/{echo.json()['job_id']}", headers=globex)
    ).status_code
    failed_id = fail.json()["job_id"]
    deadline = time.monotonic() + 20
    while (await client.get(f"/jobs/{failed_id}", headers=acme)).json()["status"] != "failed":
        assert time.monotonic() < deadline, "the failing job did not fail"
        await asyncio.sleep(0.1)
    statuses["not admin"] = (
        await client.post(f"/jobs/{failed_id}/redrive", headers=acme)
    ).status_code
    statuses["redrive"] = (await client.post(f"/jobs/{failed_id}/redrive", headers=ops)).status_code
    return statuses


async def _drain(queue: aio_pika.abc.AbstractQueue) -> list[str]:
    found = []
    while (message := await queue.get(no_ack=True, fail=False)) is not None:
        found.append(f"{message.body!r} {message.headers!r}")
    return found
