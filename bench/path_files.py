"""Which of the project's files one job's path runs, from `POST /demo/echo` to its
recorded outcome, in the stack mode (`jobrail api` and `jobrail worker` processes on
the real Postgres, RabbitMQ and Redis).

python -m bench.path_files

Both processes (and the worker's children) note every project file in which a function
is called while one request is answered and its job runs (bench/trace_site); the
window is opened after a warm-up job, and the files noted in each of three windows
(one job each) are kept, so that periodic work that happened to run in one window is
left out. A file counts when a function of it runs: imports and module constants do not.
"""

import asyncio
import os
import signal
import sys
import tempfile
from pathlib import Path

import httpx
from sqlalchemy import select
from sqlalchemy.ext.asyncio import create_async_engine

from bench.api_load import jobrail_api
from bench.common import PYTHON, ROOT, consumers, spawn, unique, wait_until
from bench.jobrail_e2e import Stack, cleanup, create_database
from jobrail.store.admin import drop_database
from jobrail.store.tables import jobs
from jobrail.transport.topology import Topology

WINDOWS = 3
QUIET = {  # no periodic work while tracing, as far as settings go
    "JOBRAIL_OUTBOX__RELAY_INTERVAL_S": "600",
}


async def _one_job(client: httpx.AsyncClient, engine: object, key: str) -> None:
    response = await client.post(
        "/demo/echo", json={"message": "path"}, headers={"Authorization": f"Bearer {key}"}
    )
    assert response.status_code == 202, response.text
    job_id = response.json()["job_id"]

    async def done() -> bool:
        async with engine.connect() as conn:  # type: ignore[attr-defined]
            status = await conn.scalar(select(jobs.c.status).where(jobs.c.id == job_id))
        return status == "succeeded"

    await wait_until(done, 30, "the job", interval=0.05)


def _signal_all(pgids: list[int], signum: int) -> None:
    for pgid in pgids:
        os.killpg(pgid, signum)


async def trace() -> tuple[list[str], list[set[str]]]:
    url = await create_database()
    stack = Stack(database_url=url, prefix=unique("bench."))
    out = Path(tempfile.mkdtemp(prefix="jobrail-path-")) / "trace"
    site = str(ROOT / "bench" / "trace_site")
    trace_env = {
        "BENCH_TRACE_OUT": str(out),
        "BENCH_TRACE_ROOT": str(ROOT),
        "PYTHONPATH": os.pathsep.join(p for p in (site, os.environ.get("PYTHONPATH")) if p),
    }
    os.environ.update(trace_env)  # jobrail_api spawns with this process's environment
    engine = create_async_engine(url)
    topology = Topology.from_settings(stack.settings().rabbit)
    worker = spawn(
        [PYTHON, "-m", "jobrail.cli", "worker"], stack.env(**QUIET, **trace_env), "path-worker"
    )
    windows: list[set[str]] = []
    try:
        await wait_until(lambda: consumers(topology.queues["jobs.default"]), 60, "the worker")
        async with jobrail_api(stack) as (server, port, key):
            pgids = [server.popen.pid, worker.popen.pid]
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
                await _one_job(client, engine, key)  # warm-up: first-time paths
                for _ in range(WINDOWS):
                    await asyncio.sleep(0.5)
                    _signal_all(pgids, signal.SIGUSR1)
                    await asyncio.sleep(0.2)
                    await _one_job(client, engine, key)
                    _signal_all(pgids, signal.SIGUSR2)
                    await asyncio.sleep(0.5)
                    seen: set[str] = set()
                    for written in out.parent.glob(f"{out.name}.*"):
                        seen |= set(filter(None, written.read_text().splitlines()))
                        written.unlink()
                    windows.append(seen)
    finally:
        worker.stop()
        await engine.dispose()
        await cleanup(stack)
        await drop_database(url)
        for name in trace_env:
            os.environ.pop(name, None)
    common = set.intersection(*windows)
    root = str(ROOT) + "/"
    return sorted(name.removeprefix(root) for name in common), windows


def main() -> None:
    files, windows = asyncio.run(trace())
    project = [f for f in files if f.startswith(("src/", "contexts/", "workers/"))]
    for name in project:
        print(name)
    sizes = ", ".join(str(len(w)) for w in windows)
    print(
        f"{len(project)} project files on the path (in each of {WINDOWS} windows; "
        f"all files per window: {sizes})",
        file=sys.stderr,
    )


if __name__ == "__main__":
    main()
