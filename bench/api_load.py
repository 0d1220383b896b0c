"""The API under load: POST /demo/echo and GET /health on `jobrail api`, and the two
plain FastAPI + Taskiq peers (bench/peer_app.py), in alternating rounds of one run.

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
from jobrail.store.admin import drop_database

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
async def jobrail_api(stack: Stack, tenant: str = "bench") -> AsyncIterator[tuple[Proc, int, str]]:
    """`jobrail api` on a free port, with a new tenant named `tenant`: yields (process,
    port, API key)."""
    port = _free_port()
    created = await asyncio.to_thread(
        subprocess.run,
        [PYTHON, "-m", "jobrail.cli", "tenants", "create", tenant],
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
        "api" if tenant == "bench" else f"api-{tenant}",
    )
    try:
        await wait_until(lambda: _ready(port, "/ready"), 60, "the API", interval=0.2)
        yield server, port, key
    finally:
        server.stop()


def echo_request(key: str) -> bytes:
    return _request("POST", "/demo/echo", ECHO_BODY, key)


@asynccontextmanager
async def peer_api(database_url: str, queue: str | None = None) -> AsyncIterator[tuple[Proc, int]]:
    """The plain FastAPI peer (bench/peer_app.py) on `uvicorn bench.peer_app:app`, its
    tasks sent to `queue` (a new one by default; deleted at the end)."""
    port = _free_port()
    queue = queue or unique("bench.peer.")
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
        yield server, port
    finally:
        server.stop()
        await delete_queues([queue, f"{queue}.dlq"], [f"{queue}.exchange"])


MEASURES = ("enqueue", "peer_insert_kiq", "peer_kiq", "health")


async def run(concurrency: int = 32, seconds: float = 4.0, rounds: int = 3) -> dict[str, Any]:
    """jobrail's API (`jobrail api`, its own httptools protocol) and the two peers, each
    on its own process and loaded alike, in `rounds` alternating rounds: `POST
    /demo/echo`, the peer's `POST /insert-kiq` and `POST /kiq`, then jobrail's `GET
    /health`, `seconds` each. The servers run side by side and each measure is taken
    right after the others of its round, so a machine that speeds up or slows down
    (other work on it, its clock) moves them together; each figure is the median over
    the rounds, and each ratio (bench.run) the median of the rounds' ratios."""
    url = await create_database()
    stack = Stack(database_url=url, prefix=unique("bench."))
    try:
        async with jobrail_api(stack) as (server, port, key), peer_api(url) as (peer, peer_port):
            requests = {
                "enqueue": (port, echo_request(key), server.popen.pid),
                "peer_insert_kiq": (
                    peer_port,
                    _request("POST", "/insert-kiq", ECHO_BODY),
                    peer.popen.pid,
                ),
                "peer_kiq": (peer_port, _request("POST", "/kiq", ECHO_BODY), peer.popen.pid),
                "health": (port, _request("GET", "/health"), server.popen.pid),
            }
            measured: list[dict[str, dict[str, float]]] = []
            for _ in range(rounds):
                measured.append({})
                for name in MEASURES:
                    target, request, pid = requests[name]
                    measured[-1][name] = await load(target, request, concurrency, seconds, pid)
    finally:
        await cleanup(stack)
        await drop_database(url)
    result: dict[str, Any] = {"concurrency": concurrency, "rounds": measured}
    for name in MEASURES:
        result[name] = {
            figure: round(statistics.median(r[name][figure] for r in measured), 3)
            for figure in measured[0][name]
        }
        result[name]["rps"] = round(result[name]["rps"])
        result[name]["p50_ms"] = round(result[name]["p50_ms"], 2)
        result[name]["p99_ms"] = round(result[name]["p99_ms"], 2)
    return result


if __name__ == "__main__":
    print(asyncio.run(run()))
