"""The real services the integration tests use, and how to reach, reset and restart them.

Outside CI a missing service skips the tests that need it; with CI=true it fails them.
"""

import asyncio
import os
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from redis.asyncio import Redis

PG_SERVER = "postgresql+asyncpg://postgres@127.0.0.1:5432"
AMQP_URL = "amqp://guest:guest@127.0.0.1:5672/"
REDIS_URL = "redis://127.0.0.1:6379/0"

PORTS = {"postgres": 5432, "rabbitmq": 5672, "redis": 6379}


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in {"1", "true", "yes"}


def reachable(port: int, host: str = "127.0.0.1", timeout: float = 1.0) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def require(service: str) -> None:
    if reachable(PORTS[service]):
        return
    message = f"{service} is not reachable on 127.0.0.1:{PORTS[service]}"
    if in_ci():
        pytest.fail(message + " (CI=true: integration tests may not skip)")
    pytest.skip(message)


def _pg_cluster() -> tuple[str, str]:
    versions = sorted(path.name for path in Path("/etc/postgresql").iterdir())
    return versions[-1], "main"


def stop_postgres() -> None:
    version, cluster = _pg_cluster()
    subprocess.run(
        ["pg_ctlcluster", "--skip-systemctl-redirect", version, cluster, "stop", "-m", "fast"],
        check=True,
        capture_output=True,
    )


def begin_smart_postgres_stop() -> subprocess.Popen[bytes]:
    """Ask Postgres to stop once its sessions have ended ("smart"): until then it keeps
    them and refuses new ones as shutting down. The command runs until it has stopped."""
    version, cluster = _pg_cluster()
    return subprocess.Popen(
        ["pg_ctlcluster", "--skip-systemctl-redirect", version, cluster, "stop", "-m", "smart"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def start_postgres(timeout: float = 60) -> None:
    """Start Postgres (if it is down) and wait until it accepts queries."""
    version, cluster = _pg_cluster()
    subprocess.run(
        ["pg_ctlcluster", "--skip-systemctl-redirect", version, cluster, "start"],
        check=False,
        capture_output=True,
    )
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready = subprocess.run(
            ["pg_isready", "-h", "127.0.0.1", "-p", "5432"],
            check=False,
            capture_output=True,
        )
        if ready.returncode == 0:
            return
        time.sleep(0.2)
    raise RuntimeError("Postgres did not come back")


REDIS_START = [
    "redis-server",
    "--daemonize",
    "yes",
    "--bind",
    "127.0.0.1",
    "-::1",
    "--port",
    "6379",
    "--save",
    "",
    "--appendonly",
    "no",
    "--dir",
    "/var/lib/redis",
    "--logfile",
    "/var/log/redis/ci.log",
]


def stop_redis() -> None:
    subprocess.run(
        ["redis-cli", "-h", "127.0.0.1", "-p", "6379", "shutdown", "nosave"],
        check=False,
        capture_output=True,
    )
    deadline = time.monotonic() + 20
    while reachable(6379) and time.monotonic() < deadline:
        time.sleep(0.1)


def start_redis(timeout: float = 30) -> None:
    """Start Redis (if it is down) and wait until it answers PING."""
    if not reachable(6379):
        subprocess.run(REDIS_START, check=False, capture_output=True)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ping = subprocess.run(
            ["redis-cli", "-h", "127.0.0.1", "-p", "6379", "ping"],
            check=False,
            capture_output=True,
            text=True,
        )
        if ping.stdout.strip() == "PONG":
            return
        time.sleep(0.1)
    raise RuntimeError("Redis did not come back")


async def wait_for(predicate, timeout: float = 10.0, interval: float = 0.05, what: str = ""):  # type: ignore[no-untyped-def]
    """Poll an async predicate until it returns something truthy; return that value."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = await predicate()
        if last:
            return last
        await asyncio.sleep(interval)
    raise AssertionError(
        f"timed out after {timeout}s waiting for {what or predicate}; last={last!r}"
    )


async def store_engine(request: pytest.FixtureRequest, tmp_path: Path, *truncate: str) -> Any:
    """An engine for a contract test's backend, `request.param` "sqlite" (a fresh
    migrated file) or "postgres" (the session's database, `truncate` statements run
    first, e.g. ``"jobs, outbox"``). The caller disposes of it."""
    from sqlalchemy import text
    from sqlalchemy.ext.asyncio import create_async_engine

    from jobrail.cli.schema import migrate
    from jobrail.settings import Settings
    from tests.support.apps import REFERENCE

    if request.param == "sqlite":
        url = f"sqlite+aiosqlite:///{tmp_path}/store.db"
        settings = Settings(database={"url": url})  # type: ignore[arg-type]
        await asyncio.to_thread(migrate, settings, REFERENCE)
    else:
        require("postgres")
        url = request.getfixturevalue("database_url")
    engine = create_async_engine(url)
    if request.param == "postgres":
        async with engine.begin() as conn:
            for tables in truncate:
                # CASCADE: rows that refer to these go too (job_attempt_failures, jobs').
                cascade = "" if tables.endswith("CASCADE") else " CASCADE"
                await conn.execute(text(f"TRUNCATE {tables}{cascade}"))
    return engine


async def delete_redis_keys(prefix: str) -> None:
    """Delete a test's own Redis keys (those under its unique `prefix`)."""
    redis = Redis.from_url(REDIS_URL)
    try:
        keys = [key async for key in redis.scan_iter(match=f"{prefix}*", count=10_000)]
        if keys:
            await redis.delete(*keys)
    finally:
        await redis.aclose()
