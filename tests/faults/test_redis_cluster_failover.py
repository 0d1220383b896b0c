"""A Redis Cluster losing a master, then a whole shard, under limited and locked jobs of
tenants on every shard (tests/support/redis_cluster.py: three masters, three replicas,
failover after about a second, full coverage off).

Each tenant's jobs (`test.exclusive`: a lock per resource and a concurrency pool, both
keyed by the tenant, so on the tenant's shard) arrive as a steady stream. Killing one
master (SIGKILL) holds back only its own tenants until its replica has taken over;
killing a whole shard (master and replica) holds back only that shard's tenants until
it is started again. Tenants on the other shards keep completing jobs all along (the
largest gap between two completions of a tenant is measured), no two holders of a lock
overlap (from the job's own start and end calls, timed outside jobrail), the workers log
no ERROR, and every job succeeds once the shard is back.
"""

import asyncio
import itertools
import time
from collections.abc import Iterator
from typing import Any

import pytest
from redis.cluster import RedisCluster as SyncCluster
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.faults.conftest import in_thread, job_counts, wait_all_terminal
from tests.support.fixtures import ApiClient
from tests.support.recorder import Call, Recorder
from tests.support.redis_cluster import RedisCluster
from tests.support.services import wait_for

TENANTS_PER_SHARD, RATE_PER_TENANT, RESOURCES = 2, 2.0, 2
SHARD_DOWN_S = 6.0
# A tenant on a healthy shard completes a job every 1 / RATE_PER_TENANT s; a stall is a
# gap of several seconds (the whole cluster's, before: 9 s while a shard was down).
HEALTHY_GAP_S = 4.0


@pytest.fixture
def fault_env(fault_env: dict[str, str], six_node_cluster: RedisCluster) -> dict[str, str]:
    return {
        **fault_env,
        "JOBRAIL_REDIS__URL": six_node_cluster.url,
        "JOBRAIL_REDIS__CLUSTER": "true",
        # A job whose shard is down comes back at most this much later.
        "JOBRAIL_LIMITS__UNAVAILABLE_RETRY_MAX_S": "3",
        "JOBRAIL_TEST_LOCK_TTL": "3",
    }


@pytest.fixture
def cluster_client(six_node_cluster: RedisCluster) -> Iterator[SyncCluster]:
    client = SyncCluster.from_url(six_node_cluster.url)
    try:
        yield client
    finally:
        client.close()


def _tenants_by_master(client: SyncCluster, masters: list[int]) -> dict[int, list[str]]:
    """`TENANTS_PER_SHARD` tenants whose keys (hash tag: the tenant) live on each master."""
    by_port: dict[int, list[str]] = {port: [] for port in masters}
    n = 0
    while any(len(tenants) < TENANTS_PER_SHARD for tenants in by_port.values()):
        tenant = f"shard-tenant-{n}"
        port = client.get_node_from_key("{" + tenant + "}").port
        if len(by_port[port]) < TENANTS_PER_SHARD:
            by_port[port].append(tenant)
        n += 1
    return by_port


def largest_gap(times: list[float], start: float, end: float) -> float:
    """The longest time in [start, end] without a completion."""
    inside = sorted(t for t in times if start <= t <= end)
    edges = [start, *inside, end]
    return max(b - a for a, b in itertools.pairwise(edges))


def overlaps(calls: list[Call], owner: dict[int, tuple[str, str]]) -> list[str]:
    """Pairs of jobs that ran at once under the same lock: each attempt runs from its
    start call to the end call that follows it (an attempt stopped before its end, its
    lock lost, has no end and is left out)."""
    by_job: dict[int, list[Call]] = {}
    for call in calls:
        if call.params.get("phase") in ("start", "end"):
            by_job.setdefault(int(call.params["n"]), []).append(call)
    intervals: dict[tuple[str, str], list[tuple[float, float, int]]] = {}
    for n, job_calls in by_job.items():
        job_calls.sort(key=lambda c: c.at)
        for first, second in itertools.pairwise(job_calls):
            if first.params["phase"] == "start" and second.params["phase"] == "end":
                intervals.setdefault(owner[n], []).append((first.at, second.at, n))
    found = []
    for lock, runs in intervals.items():
        runs.sort()
        for (_, end, a), (start, _, b) in itertools.pairwise(runs):
            if start < end:
                found.append(f"{lock}: job {a} and job {b} overlap by {end - start:.3f}s")
    return found


async def test_a_failed_master_and_a_failed_shard_hold_back_only_their_own_tenants(
    api: ApiClient,
    workers: Any,
    recorder: Recorder,
    engine: AsyncEngine,
    six_node_cluster: RedisCluster,
    cluster_client: SyncCluster,
    report: Any,
) -> None:
    cluster = six_node_cluster
    shards = cluster.shards()
    by_master = _tenants_by_master(cluster_client, list(shards))
    # The shard of the node in the processes' URL stays up (a process started later
    # finds the cluster through it); the two others fail, one after the other.
    failover, shard_down = [port for port in shards if port != cluster.ports[0]]
    healthy = cluster.ports[0]
    worker_processes = [await workers(f"w{n}") for n in range(2)]

    owner: dict[int, tuple[str, str]] = {}
    stop = asyncio.Event()

    async def stream() -> None:
        n = 0
        while not stop.is_set():
            for tenants in by_master.values():
                for tenant in tenants:
                    resource = f"r{n % RESOURCES}"
                    owner[n] = (tenant, resource)
                    await api.enqueue(
                        "test.exclusive",
                        {"url": recorder.url, "resource": resource, "n": n, "hold_ms": 50},
                        tenant=tenant,
                    )
                    n += 1
            await asyncio.sleep(1 / RATE_PER_TENANT)

    producing = asyncio.ensure_future(stream())
    try:
        await asyncio.sleep(4)
        killed_master = time.monotonic()
        await in_thread(cluster.kill, failover)
        replica = shards[failover][0]

        async def promoted() -> bool:
            return replica in await in_thread(cluster.shards)

        await wait_for(promoted, timeout=30, interval=0.2, what="the replica's promotion")
        failed_over_s = time.monotonic() - killed_master
        await asyncio.sleep(3)
        killed_shard = time.monotonic()
        for port in (shard_down, *shards[shard_down]):
            await in_thread(cluster.kill, port)
        await asyncio.sleep(SHARD_DOWN_S)
        for port in (shard_down, *shards[shard_down], failover):
            await in_thread(cluster.restart, port)
        restarted = time.monotonic()

        async def whole() -> bool:
            return all([await in_thread(cluster.state_ok, port) for port in cluster.ports])

        await wait_for(whole, timeout=60, interval=0.2, what="the cluster whole again")
        await asyncio.sleep(3)
    finally:
        stop.set()
        await producing
    done_at = await wait_all_terminal(engine, len(owner), timeout=120)

    ends: dict[str, list[float]] = {}
    finished: set[int] = set()
    for call in recorder.calls:
        if call.params.get("phase") == "end":
            n = int(call.params["n"])
            finished.add(n)
            ends.setdefault(owner[n][0], []).append(call.at)

    def gaps(port: int, start: float, end: float) -> list[float]:
        return [round(largest_gap(ends.get(t, []), start, end), 2) for t in by_master[port]]

    # While the master failed over: the two other shards' tenants went on.
    during_failover = {
        port: gaps(port, killed_master, killed_shard) for port in (healthy, shard_down)
    }
    # While a whole shard was down: the other two shards' tenants went on.
    during_shard_down = {port: gaps(port, killed_shard, restarted) for port in (healthy, failover)}
    held_back = {
        "failover": gaps(failover, killed_master, killed_shard),
        "shard down": gaps(shard_down, killed_shard, restarted),
    }
    errors = [
        f"{process.name}: {record.get('logger')}: {record.get('msg')}\n{record.get('exc', '')}"
        for process in worker_processes
        for record in process.log_records()
        if record["level"] in ("error", "critical")
    ]
    warnings = sum(
        record["level"] == "warning"
        for process in worker_processes
        for record in process.log_records()
    )
    counts = await job_counts(engine)

    assert errors == [], "\n".join(errors[:5])
    assert counts == {"succeeded": len(owner)}
    assert finished == set(owner), f"never finished: {sorted(set(owner) - finished)[:10]}"
    assert overlaps(recorder.calls, owner) == []
    for tenant_gaps in (*during_failover.values(), *during_shard_down.values()):
        assert max(tenant_gaps) < HEALTHY_GAP_S, (during_failover, during_shard_down)
    report(
        scenario="redis cluster: a master, then a shard, killed",
        jobs=len(owner),
        succeeded=counts["succeeded"],
        lost=0,
        duplicated=0,
        redeliveries_absorbed=0,
        recover_s=round(done_at - restarted, 1),
        notes=f"failover {failed_over_s:.1f}s; largest completion gap of the healthy shards' "
        f"tenants {max(max(g) for g in (*during_failover.values(), *during_shard_down.values()))}"
        f"s (the failed shards' own: {held_back}); warnings logged {warnings}",
    )
