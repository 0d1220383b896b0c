"""The limits on a three-master Redis Cluster (tests/support/redis_cluster.py): batches
that span nodes, the scheduler's lock, and job types refused at start-up."""

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Iterator
from datetime import timedelta
from typing import Any

import pytest
from redis.asyncio import RedisCluster as ClusterClient

from jobrail.limits.model import (
    Acquire,
    Concurrency,
    LimitsUnavailableError,
    Lock,
    TokenBucket,
)
from jobrail.limits.redis import RedisLimits, redis_client
from jobrail.limits.redis_calls import CrossSlotError
from jobrail.runtime.bootstrap import build_runtime
from jobrail.scheduler.leadership import Leadership
from jobrail.settings import RedisSettings, Settings
from tests.support.apps import cluster_split, reference_and_test_jobs
from tests.support.processes import BIN, Process
from tests.support.redis_cluster import RedisCluster, start_cluster, stop_cluster
from tests.support.services import wait_for

BUCKET = TokenBucket("vendor", key="vendor:{tenant_id}", capacity=2, per_second=0.01)
POOL = Concurrency("pool", key="pool:{tenant_id}", slots=1, lease_s=30)
LOCK = Lock(key="account:{tenant_id}:{account_id}", ttl_s=30)


def _limits(cluster: RedisCluster, window_s: float = 0.0) -> RedisLimits:
    """The backend with the client the processes make (no retries; see
    jobrail.runtime.container)."""
    client = redis_client(RedisSettings(url=cluster.url, cluster=True))  # type: ignore[arg-type]
    return RedisLimits(client, key_prefix=f"t{uuid.uuid4().hex[:8]}.jobrail:", window_s=window_s)


def _tenants_on_every_node(cluster_client: ClusterClient, backend: RedisLimits) -> list[str]:
    """Tenants whose keys live on different nodes, at least one per node."""
    by_node: dict[str, str] = {}
    n = 0
    while len(by_node) < 3:
        tenant = f"tenant-{n}"
        node = cluster_client.get_node_from_key(backend.key(Acquire(BUCKET, f"vendor:{tenant}")))
        assert node is not None
        by_node.setdefault(node.name, tenant)
        n += 1
    return list(by_node.values())


@pytest.fixture
async def batched(redis_cluster: RedisCluster) -> AsyncIterator[RedisLimits]:
    backend = _limits(redis_cluster, window_s=0.005)
    await backend.load_scripts()
    yield backend
    await backend.close()


async def test_calls_batched_together_across_nodes_each_get_their_own_answer(
    batched: RedisLimits,
) -> None:
    client: Any = batched._redis
    await client.initialize()
    tenants = _tenants_on_every_node(client, batched)

    def items(tenant: str, account: str) -> list[Acquire]:
        return [
            Acquire(BUCKET, f"vendor:{tenant}"),
            Acquire(POOL, f"pool:{tenant}"),
            Acquire(LOCK, f"account:{tenant}:{account}"),
        ]

    # Made in one loop turn: one batch, whose calls are on three nodes.
    first = await asyncio.gather(*(batched.admit(items(t, "a1"), holder=f"h-{t}") for t in tenants))
    again = await asyncio.gather(
        *(batched.admit(items(t, "a2"), holder=f"h2-{t}") for t in tenants)
    )
    assert [a.allowed for a in first] == [True] * len(tenants)
    assert all(a.grant is not None and a.grant.fence for a in first)
    # The pool of each tenant is full: the second round is refused by it, everywhere.
    assert [a.denied_by for a in again] == [["pool"]] * len(tenants)

    await asyncio.gather(*(batched.release(a.grant) for a in first if a.grant))
    held = await asyncio.gather(*(batched.extend(a.grant) for a in first if a.grant))
    assert held == [False] * len(tenants)
    fenced = await asyncio.gather(
        *(batched.fenced_write(f"acct-{t}", 5, "v") for t in tenants),
        *(batched.fenced_write(f"acct-{t}", 4, "stale") for t in tenants),
    )
    assert fenced == [True] * len(tenants) + [False] * len(tenants)


async def test_operators_peek_at_list_and_clear_a_lock_on_the_cluster(
    batched: RedisLimits,
) -> None:
    lock = Acquire(LOCK, "account:acme:a1")
    await batched.admit([lock], holder="holder-1")

    assert [h["holder"] for h in await batched.holders(lock)] == ["holder-1"]
    assert not (await batched.peek(lock)).allowed
    await batched.reset(lock)
    assert await batched.holders(lock) == []
    assert (await batched.peek(lock)).allowed


async def test_a_lost_script_cache_is_loaded_again_on_every_node(batched: RedisLimits) -> None:
    client: Any = batched._redis
    await client.initialize()
    tenants = _tenants_on_every_node(client, batched)
    await client.script_flush()  # what a node restarted without persistence forgets

    # Two calls per node: a pipeline to each, which must load the scripts and send again.
    admitted = await asyncio.gather(
        *(
            batched.admit([Acquire(BUCKET, f"vendor:{t}")], holder=f"h{n}")
            for t in tenants
            for n in range(2)
        )
    )

    assert [a.allowed for a in admitted] == [True] * 2 * len(tenants)


async def test_a_node_that_does_not_answer_holds_back_only_the_calls_to_it(
    batched: RedisLimits, redis_cluster: RedisCluster
) -> None:
    client: Any = batched._redis
    await client.initialize()
    tenants = _tenants_on_every_node(client, batched)
    slow = client.get_node_from_key(batched.key(Acquire(BUCKET, f"vendor:{tenants[0]}")))
    # The node takes no command for 4 s (longer than the client's 2 s socket timeout).
    assert redis_cluster.cli(slow.port, "client", "pause", "4000", "ALL").strip() == "OK"

    calls = [
        asyncio.ensure_future(batched.admit([Acquire(BUCKET, f"vendor:{t}")], holder="h"))
        for t in tenants
    ]
    try:
        await asyncio.wait(calls[1:], timeout=30)

        assert all(call.done() and call.result().allowed for call in calls[1:])
        assert not calls[0].done(), "the call to the paused node is still waiting for it"
    finally:
        await asyncio.gather(*calls, return_exceptions=True)
        # The session's cluster is whole again before the next test (UNPAUSE would wait
        # for the pause to end as well).
        await wait_for(
            lambda: asyncio.to_thread(lambda: redis_cluster.cli(slow.port, "ping") == "PONG\n"),
            timeout=30,
            what="the paused node",
        )


async def test_keys_on_two_slots_in_one_call_are_refused_clearly(batched: RedisLimits) -> None:
    with pytest.raises(CrossSlotError, match="different Redis Cluster slots"):
        await batched.admit(
            [Acquire(BUCKET, "vendor:acme"), Acquire(POOL, "pool:globex")], holder="h"
        )


async def test_the_scheduler_leads_through_a_lock_on_the_cluster(
    redis_cluster: RedisCluster,
) -> None:
    backend = _limits(redis_cluster)
    one = Leadership(backend, "one", timedelta(seconds=5))
    two = Leadership(backend, "two", timedelta(seconds=5))
    try:
        assert await one.hold()
        assert not await two.hold()
        first_term = one.fence
        await one.resign()
        assert await two.hold()
        assert two.fence is not None
        assert first_term is not None
        assert two.fence > first_term
    finally:
        await two.resign()
        await backend.close()


# -- a node down --------------------------------------------------------------------------


@pytest.fixture
def own_cluster() -> Iterator[RedisCluster]:
    """A cluster of this test's own: it stops one of its nodes. A node is presumed failed
    after a minute (not 15 s), so that the cluster keeps serving the others meanwhile."""
    cluster = start_cluster(options=("--cluster-node-timeout", "60000"))
    yield cluster
    stop_cluster(cluster)


async def test_with_one_node_down_jobs_whose_keys_live_elsewhere_are_still_admitted(
    own_cluster: RedisCluster,
) -> None:
    backend = _limits(own_cluster, window_s=0.005)
    client: Any = backend._redis
    try:
        await backend.load_scripts()
        await client.initialize()
        tenants = _tenants_on_every_node(client, backend)
        down = client.get_node_from_key(backend.key(Acquire(BUCKET, f"vendor:{tenants[0]}")))
        own_cluster.cli(down.port, "shutdown", "nosave")

        async def admitted() -> list[Any]:
            outcomes = await asyncio.gather(
                *(backend.admit([Acquire(POOL, f"pool:{t}")], holder="h") for t in tenants),
                return_exceptions=True,
            )
            # The first tries after the node died may fail on every node until redis-py
            # has noticed and read the cluster's layout again.
            healthy = outcomes[1:]
            return outcomes if all(getattr(o, "allowed", False) for o in healthy) else []

        outcomes = await wait_for(admitted, timeout=30, interval=0.2, what="other nodes")
        assert type(outcomes[0]).__name__ == "LimitsUnavailableError"
    finally:
        await backend.close()


# -- start-up -----------------------------------------------------------------------------


def _cluster_settings(cluster: RedisCluster) -> Settings:
    return Settings(
        mode="stack",
        environment="test",
        redis={"url": cluster.url, "cluster": True},  # type: ignore[arg-type]
    )


def test_a_job_type_whose_keys_cannot_share_a_slot_is_refused_at_start_up(
    redis_cluster: RedisCluster,
) -> None:
    with pytest.raises(ValueError, match="cannot share a Redis Cluster slot") as refused:
        build_runtime(_cluster_settings(redis_cluster), worker=True, modules=cluster_split.modules)
    assert "'cluster.split'" in str(refused.value)
    assert "'resource:{resource}'" in str(refused.value)
    assert "'pool:{tenant_id}'" in str(refused.value)

    # The reference application and the test job types start on the cluster.
    build_runtime(
        _cluster_settings(redis_cluster), worker=True, modules=reference_and_test_jobs.modules
    )


def test_the_api_process_stops_at_start_up_saying_which_job_type_and_keys(
    redis_cluster: RedisCluster,
) -> None:
    process = Process(
        [str(BIN / "jobrail"), "api"],
        {
            "JOBRAIL_MODE": "stack",
            "JOBRAIL_ENVIRONMENT": "test",
            "JOBRAIL_APP": "tests.support.apps:cluster_split",
            "JOBRAIL_REDIS__URL": redis_cluster.url,
            "JOBRAIL_REDIS__CLUSTER": "true",
            "JOBRAIL_API__PORT": "1",  # never reached: it must stop before serving
        },
        "api-refused",
    )
    try:
        process.proc.wait(60)
        output = process.output()
        assert process.proc.returncode != 0, output
        assert "job type 'cluster.split': its limit keys cannot share a Redis Cluster slot" in (
            output
        )
    finally:
        process.stop()


@pytest.fixture
def replicated_cluster() -> Iterator[RedisCluster]:
    """Three masters with a replica each; a master is presumed failed after 2 s."""
    cluster = start_cluster(replicas=1, options=("--cluster-node-timeout", "2000"))
    yield cluster
    stop_cluster(cluster)


async def test_after_a_failover_batched_calls_reach_the_promoted_replica(
    replicated_cluster: RedisCluster,
) -> None:
    backend = _limits(replicated_cluster, window_s=0.005)
    client: Any = backend._redis
    try:
        await backend.load_scripts()
        await client.initialize()
        tenants = _tenants_on_every_node(client, backend)
        master = client.get_node_from_key(backend.key(Acquire(BUCKET, f"vendor:{tenants[0]}")))
        replicated_cluster.cli(master.port, "shutdown", "nosave")

        async def all_admitted() -> bool:
            # Two calls per node and round: each node gets a pipeline, not a single call.
            outcomes = await asyncio.gather(
                *(
                    backend.admit([Acquire(POOL, f"pool:{t}")], holder=f"h{n}")
                    for t in tenants
                    for n in range(2)
                ),
                return_exceptions=True,
            )
            for outcome in outcomes:
                if getattr(outcome, "grant", None) is not None:
                    # A release may meet the failover too: the slot's lease frees it, as
                    # after a worker's failed release; the admissions are what is tested.
                    with contextlib.suppress(LimitsUnavailableError):
                        await backend.release(outcome.grant)
            return all(getattr(o, "allowed", False) for o in outcomes[::2])

        assert await wait_for(all_admitted, timeout=60, interval=0.5, what="the failover")
    finally:
        await backend.close()
