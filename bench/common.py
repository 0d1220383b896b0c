"""Shared plumbing of the benchmarks: isolated names, services, processes, timing."""

import asyncio
import atexit
import contextlib
import json
import os
import platform
import re
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PG_SERVER = os.environ.get("BENCH_PG_SERVER", "postgresql+asyncpg://postgres@127.0.0.1:5432")
AMQP_URL = os.environ.get("BENCH_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/")
REDIS_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/0")


def machine() -> dict[str, Any]:
    mem_kb = 0
    with Path("/proc/meminfo").open() as meminfo:
        for line in meminfo:
            if line.startswith("MemTotal:"):
                mem_kb = int(line.split()[1])
    return {
        "cores": os.cpu_count(),
        "memory_gb": round(mem_kb / 1024 / 1024, 1),
        "python": platform.python_version(),
        "platform": platform.platform(),
    }


def unique(prefix: str) -> str:
    return f"{prefix}{uuid.uuid4().hex[:6]}"


@dataclass(eq=False)  # kept in a set, by identity
class Proc:
    popen: subprocess.Popen[bytes]
    log: Path

    def stop(self, timeout: float = 20) -> None:
        _LIVE.discard(self)
        if self.popen.poll() is None:
            os.killpg(self.popen.pid, 15)
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.popen.pid, 9)
                self.popen.wait(5)

    def tail(self, n: int = 3000) -> str:
        return self.log.read_text(errors="replace")[-n:]


# Every process a benchmark started and has not stopped yet. Each runs in a session of
# its own (so that its stop reaches its children), which a signal to the benchmark does
# not reach: a benchmark ended by `timeout` or Ctrl-C would leave workers behind, holding
# database connections that then block a server's shutdown. They are killed on the way out.
_LIVE: set[Proc] = set()


def _kill_live() -> None:
    for proc in list(_LIVE):
        if proc.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.popen.pid, 9)
    _LIVE.clear()


def _on_term(signum: int, _frame: object) -> None:
    _kill_live()
    raise SystemExit(128 + signum)


_watching: list[bool] = []


def _watch_exit() -> None:
    if not _watching:
        _watching.append(True)
        atexit.register(_kill_live)
        signal.signal(signal.SIGTERM, _on_term)
        signal.signal(signal.SIGHUP, _on_term)


def spawn(argv: list[str], env: dict[str, str], name: str) -> Proc:
    log = Path(f"/tmp/jobrail-bench-{name}-{os.getpid()}.log")
    full = {k: v for k, v in os.environ.items() if not k.startswith("JOBRAIL_")}
    full.update(env)
    popen = subprocess.Popen(
        argv,
        cwd=ROOT,
        env=full,
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    proc = Proc(popen, log)
    _watch_exit()
    _LIVE.add(proc)
    return proc


PYTHON = sys.executable


async def wait_until(
    check: Callable[[], Awaitable[Any]], timeout: float, what: str, interval: float = 0.05
) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = await check()
        if value:
            return value
        await asyncio.sleep(interval)
    raise TimeoutError(f"timed out waiting for {what}")


async def consumers(queue: str) -> int:
    import aio_pika

    connection = await aio_pika.connect(AMQP_URL)
    try:
        async with connection.channel() as channel:
            declared = await channel.declare_queue(queue, passive=True)
            return int(declared.declaration_result.consumer_count or 0)
    except Exception:
        return 0
    finally:
        await connection.close()


async def delete_queues(names: list[str], exchanges: list[str] = ()) -> None:  # type: ignore[assignment]
    import aio_pika

    connection = await aio_pika.connect(AMQP_URL)
    async with connection.channel() as channel:
        for name in names:
            await channel.queue_delete(name, if_unused=False, if_empty=False)
        for exchange in exchanges:
            await channel.exchange_delete(exchange)
    await connection.close()


def tree_cpu_s(pid: int) -> float:
    """CPU time (user + system) of process `pid` and its live children, in seconds."""
    import psutil

    process = psutil.Process(pid)
    total = 0.0
    for each in (process, *process.children(recursive=True)):
        times = each.cpu_times()
        total += times.user + times.system
    return total


def pss_mb(pid: int) -> float:
    """The memory of a process and its children: their proportional set sizes (PSS), each
    page shared by several processes split among them. RSS would count a page the
    supervisor shares with the worker processes it forked once in each."""
    import psutil

    process = psutil.Process(pid)
    total = process.memory_full_info().pss
    for child in process.children(recursive=True):
        total += child.memory_full_info().pss
    return round(total / 1024 / 1024, 1)


def write_json(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")


def leaf_file(stack: str) -> str:
    """Where a py-spy raw stack's innermost frame is: the package for a library, the
    path for jobrail and the standard library."""
    match = re.search(r"\((.*?):\d+\)", stack.split(";")[-1])
    path = match.group(1) if match else "?"
    if "site-packages/" in path:
        return path.split("site-packages/")[1].split("/")[0]
    if "jobrail/" in path:
        return "jobrail/" + path.split("jobrail/")[-1]
    if "python3.11/" in path:
        return "stdlib/" + path.split("python3.11/")[-1]
    return path
