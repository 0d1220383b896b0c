"""The limits on a six-node Redis Cluster (three masters, three replicas; see
tests/support/redis_cluster.py) while a master fails over and while a whole shard is
down: calls whose keys live on the other shards never fail, calls to the failed shard
fail as "unavailable" only (never another error), and a lock whose release failed is
released once the shard's replica has taken over."""

import asyncio
import uuid
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from redis.asyncio import RedisCluster as ClusterClient

from jobrail.limits.model import Acquire, Concurrency, Grant, LimitsUnavailableError, Lock
from jobrail.limits.redis import RedisLimits, redis_client
from jobrail.settings import RedisSettings
from jobrail.telemetry.tracing import use_tracer_provider
from jobrail.worker.releases import ReleaseRetries
from tests.support.redis_cluster import RedisCluster
from tests.support.services import wait_for

POOL = Concurrency("pool", key="pool:{tenant_id}", slots=1000, lease_s=30)
LOCK = Lock(key="account:{tenant_id}:a1", ttl_s=60)


def _limits(cluster: RedisCluster) -> RedisLimits:
    client = redis_client(RedisSettings(url=cluster.url, cluster=True))  # type: ignore[arg-type]
    return RedisLimits(client, key_prefix=f"t{uuid.uuid4().hex[:8]}.jobrail:", window_s=0.002)


async def _tenants_by_master(backend: RedisLimits, cluster: RedisCluster) -> dict[int, list[str]]:
    """Two tenants per master whose keys live on it, by the master's port."""
    client: Any = backend._redis
    await client.initialize()
    by_port: dict[int, list[str]] = {port: [] for port in cluster.shards()}
    n = 0
    while any(len(tenants) < 2 for tenants in by_port.values()):
        tenant = f"tenant-{n}"
        node = client.get_node_from_key(backend.key(Acquire(POOL, f"pool:{tenant}")))
        if len(by_port[node.port]) < 2:
            by_port[node.port].append(tenant)
        n += 1
    return by_port


async def _admit_for(
    backend: RedisLimits, tenants: list[str], seconds: float
) -> dict[str, list[BaseException | None]]:
    """Admit (and release) every tenant's pool over and over for `seconds`: per tenant,
    the outcome of each round (None: admitted)."""
    outcomes: dict[str, list[BaseException | None]] = {t: [] for t in tenants}

    async def one(tenant: str) -> None:
        try:
            admission = await backend.admit([Acquire(POOL, f"pool:{tenant}")], holder=tenant)
            assert admission.grant is not None
            await backend.release(admission.grant)
        except Exception as exc:  # recorded, and checked by the test
            outcomes[tenant].append(exc)
        else:
            outcomes[tenant].append(None)

    loop = asyncio.get_running_loop()
    end = loop.time() + seconds
    while loop.time() < end:
        await asyncio.gather(*(one(t) for t in tenants))
        await asyncio.sleep(0.02)
    return outcomes


def _failures(outcomes: list[BaseException | None]) -> list[BaseException]:
    return [o for o in outcomes if o is not None]


async def test_a_master_failing_over_fails_only_the_calls_of_its_own_keys(
    six_node_cluster: RedisCluster,
) -> None:
    backend = _limits(six_node_cluster)
    try:
        await backend.load_scripts()
        by_port = await _tenants_by_master(backend, six_node_cluster)
        victim = next(p for p in by_port if p != six_node_cluster.ports[0])
        tenants = [t for ts in by_port.values() for t in ts]
        running = asyncio.ensure_future(_admit_for(backend, tenants, 8.0))
        await asyncio.sleep(1.0)
        await asyncio.to_thread(six_node_cluster.kill, victim)
        outcomes = await running

        for port, own in by_port.items():
            for tenant in own:
                failures = _failures(outcomes[tenant])
                if port != victim:
                    assert failures == [], f"{tenant} (healthy shard) failed: {failures[:3]}"
                else:
                    assert all(isinstance(f, LimitsUnavailableError) for f in failures)
                    # Its replica took over: the last rounds were admitted again.
                    assert outcomes[tenant][-5:] == [None] * 5, outcomes[tenant][-10:]
    finally:
        await backend.close()


async def test_a_whole_shard_down_fails_only_the_calls_of_its_own_keys(
    six_node_cluster: RedisCluster,
) -> None:
    backend = _limits(six_node_cluster)
    try:
        await backend.load_scripts()
        by_port = await _tenants_by_master(backend, six_node_cluster)
        shards = six_node_cluster.shards()
        victim = next(p for p in by_port if p != six_node_cluster.ports[0])
        tenants = [t for ts in by_port.values() for t in ts]
        running = asyncio.ensure_future(_admit_for(backend, tenants, 6.0))
        await asyncio.sleep(1.0)
        for port in (victim, *shards[victim]):
            await asyncio.to_thread(six_node_cluster.kill, port)
        outcomes = await running

        for port, own in by_port.items():
            for tenant in own:
                failures = _failures(outcomes[tenant])
                if port != victim:
                    assert failures == [], f"{tenant} (healthy shard) failed: {failures[:3]}"
                else:
                    assert failures, "the shard's own keys cannot be served"
                    assert all(isinstance(f, LimitsUnavailableError) for f in failures)
    finally:
        await backend.close()


async def test_a_lock_whose_release_failed_is_released_once_the_replica_took_over(
    six_node_cluster: RedisCluster,
) -> None:
    backend = _limits(six_node_cluster)
    retries = ReleaseRetries(backend, tries=12, first_wait_s=0.25, max_wait_s=2.0)
    try:
        await backend.load_scripts()
        by_port = await _tenants_by_master(backend, six_node_cluster)
        victim = next(p for p in by_port if p != six_node_cluster.ports[0])
        tenant = by_port[victim][0]
        lock = Acquire(LOCK, f"account:{tenant}:a1")
        admission = await backend.admit([lock], holder="job-1/h")
        grant: Grant | None = admission.grant
        assert grant is not None
        client: ClusterClient = backend._redis  # type: ignore[assignment]
        # The lock is on the replica too before its master dies.
        await client.execute_command(
            "WAIT", 1, 5000, target_nodes=client.get_node_from_key(backend.key(lock))
        )
        await asyncio.to_thread(six_node_cluster.kill, victim)

        try:
            await backend.release(grant)
        except LimitsUnavailableError as exc:
            retries.add(grant, exc)
        else:
            raise AssertionError("the release reached a killed master")

        async def released() -> bool:
            try:
                return retries.pending == 0 and await backend.holders(lock) == []
            except LimitsUnavailableError:
                return False

        # Long before the lock's 60 s TTL.
        await wait_for(released, timeout=30, interval=0.2, what="the retried release")
        assert retries.released == 1
        assert retries.given_up == 0
    finally:
        await retries.close()
        await backend.close()


async def test_each_node_pipeline_is_a_client_span_without_arguments(
    redis_cluster: RedisCluster,
) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    use_tracer_provider(provider)
    backend = _limits(redis_cluster)
    try:
        with trace.get_tracer("test").start_as_current_span("job"):
            await backend.admit([Acquire(POOL, "pool:acme")], holder="h")
    finally:
        await backend.close()
        use_tracer_provider(None)

    (span,) = [s for s in exporter.get_finished_spans() if s.name == "EVALSHA"]
    attributes = dict(span.attributes or {})
    assert span.kind == trace.SpanKind.CLIENT
    assert attributes["db.system"] == "redis"
    assert attributes["db.statement"] == "EVALSHA ?"
    assert attributes["server.port"] in redis_cluster.ports
