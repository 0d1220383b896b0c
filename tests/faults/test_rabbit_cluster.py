"""Stop the RabbitMQ node every process is connected to, on a three-node cluster
(tests/support/rabbit_cluster.py), under a stream of enqueues: the API and both workers
move to the next node, completions resume within seconds, nothing is lost and every side
effect happens exactly once (counted by the recorder, outside jobrail)."""

import asyncio
import itertools
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import aio_pika
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.faults.conftest import in_thread, job_counts, wait_all_terminal
from tests.faults.test_broker_reconnect_logs import broker_log
from tests.support.apps import reference_and_test_jobs
from tests.support.fixtures import ApiClient, settings_from
from tests.support.processes import Process, start_worker
from tests.support.rabbit_cluster import RabbitCluster, start_cluster, stop_cluster
from tests.support.recorder import Recorder
from tests.support.services import wait_for

JOBS, EVERY_S = 300, 0.04  # a stream of about 12 s
STOP_AFTER = 100  # enqueues before the node stops
MOVED = "moved from RabbitMQ node"


@pytest.fixture
def cluster() -> Iterator[RabbitCluster]:
    started = start_cluster()
    try:
        yield started
    finally:
        stop_cluster(started)


@pytest.fixture
def cluster_env(fault_env: dict[str, str], cluster: RabbitCluster) -> dict[str, str]:
    # In order: every process starts on jr1, the node the test stops.
    return {
        **fault_env,
        "JOBRAIL_RABBIT__URL": cluster.url(),
        "JOBRAIL_RABBIT__NODE_ORDER": "in_order",
    }


@pytest.fixture
async def cluster_api(
    cluster_env: dict[str, str], monkeypatch: pytest.MonkeyPatch, make_api: Callable[..., Any]
) -> AsyncIterator[ApiClient]:
    settings = settings_from(cluster_env, monkeypatch)
    async with make_api(settings, reference_and_test_jobs.modules) as client:
        yield client


@pytest.fixture
def cluster_workers(cluster_env: dict[str, str]) -> Iterator[list[Process]]:
    started = [start_worker(cluster_env, name=f"cluster-w{n}") for n in range(2)]
    try:
        yield started
    finally:
        for process in started:
            process.stop()


async def _consumers(cluster: RabbitCluster, queue: str) -> int:
    """Consumers of `queue` across the cluster, asked of the last node (never stopped)."""
    connection = await aio_pika.connect(cluster.url([2]), timeout=5)
    try:
        channel = await connection.channel()
        declared = await channel.declare_queue(queue, passive=True)
        return declared.declaration_result.consumer_count or 0
    finally:
        await connection.close()


async def test_stopping_the_node_every_process_uses_moves_them_on_and_loses_nothing(
    cluster: RabbitCluster,
    cluster_env: dict[str, str],
    cluster_api: ApiClient,
    cluster_workers: list[Process],
    recorder: Recorder,
    engine: AsyncEngine,
    report: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, "jobrail")
    queue = cluster_env["JOBRAIL_RABBIT__PREFIX"] + "jobs.default"

    async def consuming() -> bool:
        for process in cluster_workers:
            assert process.alive(), process.output()[-3000:]
        try:
            return await _consumers(cluster, queue) >= len(cluster_workers)
        except Exception:  # not declared yet
            return False

    await wait_for(consuming, timeout=60, interval=0.2, what="both workers to consume")
    ids: list[str] = []
    stopped: dict[str, float] = {}

    async def stream() -> None:
        for n in range(JOBS):
            ids.append(await cluster_api.enqueue("test.effect", {"url": recorder.url}))
            if n + 1 == STOP_AFTER:
                stopped["at"] = time.monotonic()
                asyncio.get_running_loop().create_task(stop_first())
            await asyncio.sleep(EVERY_S)

    async def stop_first() -> None:
        await in_thread(cluster.stop_node, cluster.nodes[0])
        stopped["done"] = time.monotonic()

    readiness: list[int] = []

    async def watch_ready() -> None:
        while len(ids) < JOBS:
            if "at" in stopped:
                readiness.append((await cluster_api.get("/ready")).status_code)
            await asyncio.sleep(0.1)

    await asyncio.gather(stream(), watch_ready())
    await wait_for(lambda: _ready(stopped), timeout=90, interval=0.1, what="the node to stop")
    done_at = await wait_all_terminal(engine, JOBS, timeout=120)

    async def ready() -> bool:
        return (await cluster_api.get("/ready")).status_code == 200

    await wait_for(ready, timeout=30, interval=0.2, what="the API to be ready again")
    counts = await job_counts(engine)
    effects = recorder.effects()
    times = sorted(call.at for call in recorder.calls)
    before = [t for t in times if t < stopped["at"]]
    # The stream never pauses (an enqueue every 40 ms): the longest time without a
    # completion is the outage the processes saw.
    gap_s = max(b - a for a, b in itertools.pairwise(times))
    # Each worker's log: no ERROR; about the broker, the loss and the move, once each.
    logs = {p.name: broker_log(p.log_records()) for p in cluster_workers}
    # (Only jobrail's records: one of aio-pika's cannot be formatted.)
    ours = [r.getMessage() for r in caplog.records if r.name.startswith("jobrail")]
    api_moves = [line for line in ours if line.startswith(MOVED)]
    left_over_lines = [line for line in ours if line.startswith("fast path left")]

    assert counts == {"succeeded": JOBS}, counts
    assert set(effects) == set(ids)  # nothing lost
    assert set(effects.values()) == {1}, {k: v for k, v in effects.items() if v != 1}
    assert before, "no job completed before the stop"
    # Completions resume within seconds of the stop (it was the whole outage before).
    assert gap_s < 15, gap_s
    for name, (errors, warnings, _back) in logs.items():
        assert errors == [], (name, errors)
        said = [w.removeprefix("jobrail.broker: ") for w in warnings]
        assert len(said) == 2, (name, warnings)
        assert said[0].startswith("lost the connection to RabbitMQ"), (name, warnings)
        assert said[1].startswith(f"{MOVED} {cluster.nodes[0].address} to "), (name, warnings)
    # The API (in this process) said it moved, once, and names where to.
    assert len(api_moves) == 1, api_moves
    assert cluster.nodes[1].address in api_moves[0]
    # What the fast path left to the relay is a line now and then, not one per enqueue.
    assert len(left_over_lines) <= 3, left_over_lines
    report(
        scenario="rabbitmq cluster: stop the node every process uses, 300 enqueues",
        jobs=JOBS,
        succeeded=counts["succeeded"],
        lost=0,
        duplicated=0,
        redeliveries_absorbed=0,
        recover_s=round(gap_s, 1),
        notes=f"longest gap between completions {round(gap_s, 1)}s, node stop took "
        f"{round(stopped['done'] - stopped['at'], 1)}s, all done "
        f"{round(done_at - stopped['at'], 1)}s after the stop, cluster up in "
        f"{round(cluster.started_in_s, 1)}s, /ready 503 in {readiness.count(503)} of "
        f"{len(readiness)} looks after the stop",
    )


async def _ready(stopped: dict[str, float]) -> bool:
    return "done" in stopped
