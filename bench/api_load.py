"""The API under load: POST /demo/echo beside GET /health (same server), then the two
plain FastAPI + Taskiq peers (bench/peer_app.py), in the same run.

The load generator is a lean keep-alive HTTP/1.1 client (raw asyncio streams), so
that it measures the server rather than itself.
"""

import asyncio
import json
import os
import socket
import statistics
import subprocess
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import psutil

from bench.common import (
    AMQP_URL,
    PYTHON,
    ROOT,
    Proc,
    delete_queues,
    spawn,
    unique,
    wait_until,
)
from bench.jobrail_e2e import Stack, cleanup, create_database
from jobrail.persistence.admin import drop_database

ECHO_BODY = b'{"message": "bench"}'
ENQUEUE_LIMITS = json.dumps(
    [{"scope": "tenant", "limit": 100000000, "window_s": 60, "algorithm": "token_bucket"}]
)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


async def _client(
    port: int, request: bytes, stop_at: float, latencies: list[float], statuses: list[int]
) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        while time.perf_counter() < stop_at:
            started = time.perf_counter()
            writer.write(request)
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":", 1)[1])
            await reader.readexactly(length)
            latencies.append(time.perf_counter() - started)
            statuses.append(int(head[9:12]))
    finally:
        writer.close()


def _cpu_s(pid: int | None) -> float:
    if pid is None:
        return 0.0
    times = psutil.Process(pid).cpu_times()
    return float(times.user + times.system)


async def load(
    port: int, request: bytes, concurrency: int, seconds: float, pid: int | None = None
) -> dict[str, float]:
    """Requests/s and latencies at `concurrency`; with the server's `pid`, also the CPU
    time it spent per request (user + system): on a machine other work shares, the
    figure that moves least with the load of others."""
    latencies: list[float] = []
    statuses: list[int] = []
    warm_stop = time.perf_counter() + 1.0
    await asyncio.gather(*(_client(port, request, warm_stop, [], []) for _ in range(concurrency)))
    started = time.perf_counter()
    cpu_before = _cpu_s(pid)
    stop_at = started + seconds
    await asyncio.gather(
        *(_client(port, request, stop_at, latencies, statuses) for _ in range(concurrency))
    )
    elapsed = time.perf_counter() - started
    cpu = _cpu_s(pid) - cpu_before
    latencies.sort()
    return {
        "cpu_ms_per_request": round(1000 * cpu / len(latencies), 3),
        "rps": round(len(latencies) / elapsed),
        "p50_ms": round(statistics.median(latencies) * 1000, 2),
        "p99_ms": round(latencies[int(len(latencies) * 0.99)] * 1000, 2),
        "errors": sum(1 for status in statuses if status >= 400),
    }


def _request(method: str, path: str, body: bytes = b"", key: str = "") -> bytes:
    lines = [f"{method} {path} HTTP/1.1", "Host: bench", f"Authorization: Bearer {key}"]
    if body:
        lines += ["Content-Type: application/json", f"Content-Length: {len(body)}"]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


async def _ready(port: int, path: str) -> bool:
    try:
        async with httpx.AsyncClient() as client:
            response = await client.get(f"http://127.0.0.1:{port}{path}", timeout=1)
        return response.status_code == 200
    except httpx.HTTPError:
        return False


@asynccontextmanager
async def jobrail_api(stack: Stack) -> AsyncIterator[tuple[Proc, int, str]]:
    """`jobrail api` on a free port, with a tenant: yields (process, port, API key)."""
    port = _free_port()
    created = await asyncio.to_thread(
        subprocess.run,
        [PYTHON, "-m", "jobrail.cli", "tenants", "create", "bench"],
        env={
            **{k: v for k, v in os.environ.items() if not k.startswith("JOBRAIL_")},
            **stack.env(),
        },
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    key = json.loads(created.stdout)["api_key"]
    server = spawn(
        [PYTHON, "-m", "jobrail.cli", "api"],
        stack.env(
            JOBRAIL_API__PORT=str(port),
            JOBRAIL_API_LIMITS__ENQUEUE=ENQUEUE_LIMITS,
            JOBRAIL_API_LIMITS__READ="[]",
            JOBRAIL_METRICS__TOKEN=unique("bench-metrics-"),
        ),
        "api",
    )
    try:
        await wait_until(lambda: _ready(port, "/ready"), 60, "the API", interval=0.2)
        yield server, port, key
    finally:
        server.stop()


def echo_request(key: str) -> bytes:
    return _request("POST", "/demo/echo", ECHO_BODY, key)


async def _jobrail(
    stack: Stack, concurrency: int, seconds: float
) -> tuple[dict[str, float], dict[str, float]]:
    """`POST /demo/echo`, then `GET /health`, on `jobrail api` (its own httptools protocol)."""
    async with jobrail_api(stack) as (server, port, key):
        pid = server.popen.pid
        enqueue = await load(port, echo_request(key), concurrency, seconds, pid)
        health = await load(port, _request("GET", "/health"), concurrency, seconds, pid)
    return enqueue, health


async def _peers(
    database_url: str, concurrency: int, seconds: float
) -> tuple[dict[str, float], dict[str, float]]:
    """The plain FastAPI peer (bench/peer_app.py) on `uvicorn bench.peer_app:app`:
    `POST /insert-kiq`, then `POST /kiq`, loaded exactly like `POST /demo/echo`."""
    port = _free_port()
    queue = unique("bench.peer.")
    server = spawn(
        [
            PYTHON,
            "-m",
            "uvicorn",
            "bench.peer_app:app",
            "--port",
            str(port),
            "--log-level",
            "warning",
            "--no-access-log",
        ],
        {
            "BENCH_QUEUE": queue,
            "BENCH_AMQP_URL": AMQP_URL,
            "BENCH_PEER_DSN": database_url.replace("postgresql+asyncpg://", "postgresql://"),
        },
        "peer",
    )
    try:
        await wait_until(lambda: _ready(port, "/health"), 60, "the peer API", interval=0.2)
        pid = server.popen.pid
        insert_request = _request("POST", "/insert-kiq", ECHO_BODY)
        insert_kiq = await load(port, insert_request, concurrency, seconds, pid)
        kiq = await load(port, _request("POST", "/kiq", ECHO_BODY), concurrency, seconds, pid)
    finally:
        server.stop()
        await delete_queues([queue, f"{queue}.dlq"], [f"{queue}.exchange"])
    return insert_kiq, kiq


async def run(concurrency: int = 32, seconds: float = 8.0) -> dict[str, Any]:
    """jobrail's API and its two peers, back to back in one run, each on its own
    uvicorn process, under the same load."""
    url = await create_database()
    stack = Stack(database_url=url, prefix=unique("bench."))
    try:
        enqueue, health = await _jobrail(stack, concurrency, seconds)
        insert_kiq, kiq = await _peers(url, concurrency, seconds)
    finally:
        await cleanup(stack)
        await drop_database(url)
    return {
        "concurrency": concurrency,
        "enqueue": enqueue,
        "health": health,
        "peer_insert_kiq": insert_kiq,
        "peer_kiq": kiq,
    }


if __name__ == "__main__":
    print(asyncio.run(run()))
