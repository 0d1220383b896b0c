"""A unique key and a debounce key hold when two `jobrail api` processes take the same
key's enqueues at once (Postgres): one job, one message; once the job has ended, the
key is free again. No worker runs: every job stays where its enqueue left it."""

import asyncio
import json
import os
import subprocess
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.support.processes import BIN, ROOT, Process
from tests.support.servers import free_port
from tests.support.services import wait_for

CONCURRENT = 20  # per process
UNLIMITED = '[{"scope": "tenant", "limit": 1000000, "window_s": 60}]'


def _new_tenant(env: dict[str, str], name: str) -> str:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("JOBRAIL_")}
    done = subprocess.run(
        [str(BIN / "jobrail"), "tenants", "create", name],
        cwd=ROOT,
        env={**full_env, **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    key: str = json.loads(done.stdout)["api_key"]
    return key


@pytest.fixture
def two_apis(stack_env: dict[str, str]) -> Iterator[list[str]]:
    processes = []
    bases = []
    for name in ("api-a", "api-b"):
        port = free_port()
        env = {
            **stack_env,
            "JOBRAIL_API__PORT": str(port),
            "JOBRAIL_API_LIMITS__ENQUEUE": UNLIMITED,
        }
        processes.append(Process([str(BIN / "jobrail"), "api"], env, name))
        bases.append(f"http://127.0.0.1:{port}")
    try:
        yield bases
    finally:
        for process in processes:
            process.stop()


@pytest.fixture
async def clients(
    two_apis: list[str], stack_env: dict[str, str]
) -> AsyncIterator[list[httpx.AsyncClient]]:
    key = _new_tenant(stack_env, "keys-tenant")
    headers = {"Authorization": f"Bearer {key}"}
    clients = [httpx.AsyncClient(base_url=base, headers=headers, timeout=30) for base in two_apis]
    try:
        for client in clients:

            async def serving(client: httpx.AsyncClient = client) -> bool:
                try:
                    return (await client.get("/health")).status_code == 200
                except httpx.HTTPError:
                    return False

            await wait_for(serving, timeout=60, what=f"{client.base_url} to serve")
        yield clients
    finally:
        for client in clients:
            await client.aclose()


async def _burst(clients: list[httpx.AsyncClient], params: dict[str, str]) -> list[httpx.Response]:
    """CONCURRENT enqueues through each process at once, each its own message."""
    sends = [
        client.post("/demo/echo", json={"message": f"{i}-{n}"}, params=params)
        for n in range(CONCURRENT)
        for i, client in enumerate(clients)
    ]
    return list(await asyncio.gather(*sends))


async def _rows(engine: AsyncEngine, column: str, key: str) -> list[Any]:
    async with engine.connect() as conn:
        rows = await conn.execute(
            text(f"SELECT id, status, payload FROM jobs WHERE {column} = :key"),
            {"key": key},
        )
        return list(rows.all())


async def _messages(engine: AsyncEngine, job_ids: list[Any]) -> int:
    async with engine.connect() as conn:
        count = await conn.scalar(
            text("SELECT count(*) FROM outbox WHERE convert_from(body, 'UTF8') LIKE ANY(:ids)"),
            {"ids": [f"%{job_id}%" for job_id in job_ids]},
        )
    return int(count or 0)


async def test_a_unique_key_makes_one_job_across_two_api_processes_until_it_ends(
    clients: list[httpx.AsyncClient], engine: AsyncEngine
) -> None:
    answers = await _burst(clients, {"unique_key": "sync:42"})

    assert {a.status_code for a in answers} == {202}, [
        a.text for a in answers if a.status_code != 202
    ][:3]
    job_ids = {a.json()["job_id"] for a in answers}
    assert len(job_ids) == 1
    rows = await _rows(engine, "unique_key", "sync:42")
    assert len(rows) == 1
    assert await _messages(engine, [rows[0].id]) == 1

    # Once it has ended (here: cancelled while it waits), the key is free again.
    job_id = job_ids.pop()
    assert (await clients[0].post(f"/jobs/{job_id}/cancel")).status_code == 200
    after = await _burst(clients, {"unique_key": "sync:42"})
    new_ids = {a.json()["job_id"] for a in after}
    assert len(new_ids) == 1
    assert new_ids != {job_id}
    assert len(await _rows(engine, "unique_key", "sync:42")) == 2


async def test_debounced_enqueues_make_one_job_with_one_of_their_payloads_across_two_processes(
    clients: list[httpx.AsyncClient], engine: AsyncEngine
) -> None:
    answers = await _burst(clients, {"debounce_key": "digest", "debounce_s": "3600"})

    assert {a.status_code for a in answers} == {202}, [a.text for a in answers][:3]
    assert len({a.json()["job_id"] for a in answers}) == 1
    [row] = await _rows(engine, "debounce_key", "digest")
    sent = {f"{i}-{n}" for n in range(CONCURRENT) for i in range(2)}
    assert row.status == "pending"
    assert row.payload["message"] in sent
    assert await _messages(engine, [row.id]) == 1

    # The last enqueue's payload is the one the job holds, whichever process took it.
    for client, message in ((clients[1], "final-1"), (clients[0], "final-0")):
        last = await client.post(
            "/demo/echo",
            json={"message": message},
            params={"debounce_key": "digest", "debounce_s": "3600"},
        )
        assert last.json() == {"job_id": str(row.id), "status": "pending", "created": False}
        [now] = await _rows(engine, "debounce_key", "digest")
        assert now.payload["message"] == message
