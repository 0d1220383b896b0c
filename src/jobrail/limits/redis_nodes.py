"""The limits' script calls on a Redis Cluster: one batch per node, sent to that node
only, so that a node that fails or fails over holds back only the calls of its keys.

Each node's batch goes out as a pipeline on that node's own connections
(``ClusterNode.execute_pipeline``), not through the cluster client's command or
pipeline methods: on a node's failure those close the connections of *every* node
(``RedisCluster.aclose()`` on ClusterDownError, SlotNotCoveredError, repeated MOVED
replies, a failed refresh of the layout), which failed the calls in flight to the
healthy nodes with errors such as ``AttributeError: 'NoneType' object has no
attribute 'writelines'``, and made the next calls of every tenant wait for a new
layout. Here a failure touches only its node:

- the node does not answer (refused, timed out, its connection lost): its calls fail,
  its own connections are dropped (in use ones once their command ends), and the
  cluster's layout is read again in the background;
- the node answers with a cluster error (CLUSTERDOWN, MASTERDOWN, TRYAGAIN, MOVED, ASK,
  READONLY): those calls fail, and the layout is read again after MOVED, MASTERDOWN,
  CLUSTERDOWN or READONLY (a failover or a resharding moved the slot);
- the node forgot the scripts (restarted without persistence): they are loaded on that
  node and the calls sent again.

A failed call is "Redis unavailable" for its keys (``LimitsUnavailableError``): the job
waits and comes back, routed by the new layout. The layout is read at most once per
`REFRESH_EVERY_S`, in one task, whatever the number of failing calls.
"""

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from typing import Any

from opentelemetry import trace
from redis.asyncio import RedisCluster
from redis.asyncio.cluster import ClusterNode, PipelineCommand
from redis.exceptions import (
    AskError,
    ClusterDownError,
    NoScriptError,
    ReadOnlyError,
    RedisClusterException,
)

from jobrail.kernel.batching import Coalescer
from jobrail.limits.redis_errors import unreachable

log = logging.getLogger("jobrail.limits")
_tracer = trace.get_tracer("jobrail.limits")

Call = tuple[Any, list[str], list[str]]  # script, keys, arguments

# Replies that say the slot is served elsewhere now (MOVED is an AskError; MASTERDOWN a
# ClusterDownError): read the layout again.
_MOVED = (AskError, ClusterDownError, ReadOnlyError)
REFRESH_EVERY_S = 0.5


class LayoutRefresh:
    """Reads the cluster's layout again, in one background task at a time, at most
    once per `REFRESH_EVERY_S`. The nodes manager's refresh keeps the connections of
    the nodes that stay (redis-py marks them to reconnect once their command ends)."""

    def __init__(self, cluster: RedisCluster) -> None:
        self._cluster = cluster
        self._task: asyncio.Task[None] | None = None
        self._last = float("-inf")

    def request(self) -> None:
        loop = asyncio.get_running_loop()
        if self._task is not None and not self._task.done():
            return
        if loop.time() - self._last < REFRESH_EVERY_S:
            return
        self._last = loop.time()
        self._task = loop.create_task(self._refresh())

    async def _refresh(self) -> None:
        try:
            await self._cluster.nodes_manager.initialize()
        except Exception as exc:  # no node answers: the next failing call asks again
            if not unreachable(exc):
                raise
            log.debug("reading the Redis Cluster's layout failed: %s", exc)
        finally:
            self._last = asyncio.get_running_loop().time()

    async def wait(self) -> None:
        """Until the refresh under way (if any) is done (for tests and shutdown)."""
        if self._task is not None:
            with contextlib.suppress(Exception):
                await self._task

    def cancel(self) -> None:
        if self._task is not None:
            self._task.cancel()


class NodeCalls:
    """Script calls on a Redis Cluster, batched by event-loop turn and by node."""

    def __init__(self, cluster: RedisCluster, window_s: float) -> None:
        self._cluster = cluster
        self._window_s = window_s
        self._batches: dict[str, Coalescer[Call, Any]] = {}
        self.layout = LayoutRefresh(cluster)

    async def call(self, script: Any, keys: list[str], args: list[str]) -> Any:
        """Send one call in the batch of the node serving `keys` (one slot)."""
        cluster = self._cluster
        if cluster._initialize:  # the first call, or the client was closed: read the layout
            await cluster.initialize()
        node = cluster.get_node_from_key(keys[0])  # SlotNotCoveredError: no node serves it
        if node is None:
            raise RedisClusterException(f"no node serves the key {keys[0]!r}")
        batch = self._batches.get(node.name)
        if batch is None:
            name = node.name
            batch = self._batches[name] = Coalescer(
                lambda calls: self._send(name, calls), self._window_s
            )
        return await batch.submit((script, keys, args))

    async def _send(self, name: str, calls: Sequence[Call]) -> list[Any]:
        if not trace.get_current_span().is_recording():
            return await self._send_to(name, calls)
        # A client span per node pipeline, as redis-py's instrumentation makes for the
        # client's own commands (which these calls do not go through): no arguments.
        host, _, port = name.rpartition(":")
        attributes: dict[str, str | int] = {
            "db.system": "redis",
            "db.statement": "EVALSHA ?",
            "db.redis.pipeline_length": len(calls),
            "server.address": host,
            "server.port": int(port) if port.isdigit() else 0,
        }
        with _tracer.start_as_current_span(
            "EVALSHA", kind=trace.SpanKind.CLIENT, attributes=attributes
        ):
            return await self._send_to(name, calls)

    async def _send_to(self, name: str, calls: Sequence[Call]) -> list[Any]:
        node = self._cluster.get_node(node_name=name)
        if node is None:  # gone from the layout since the calls were routed to it
            self.layout.request()
            return [RedisClusterException(f"node {name} left the cluster")] * len(calls)
        try:
            results = await self._pipeline(node, calls)
        except Exception as exc:
            if not unreachable(exc):
                raise
            # Only this node's connections: the other nodes' batches go on.
            node.update_active_connections_for_reconnect()
            await node.disconnect_free_connections()
            self.layout.request()
            return [exc] * len(calls)
        if any(isinstance(result, _MOVED) for result in results):
            self.layout.request()
        return results

    async def _pipeline(self, node: ClusterNode, calls: Sequence[Call]) -> list[Any]:
        commands = [_evalsha(i, call) for i, call in enumerate(calls)]
        await node.execute_pipeline(commands)
        results = [command.result for command in commands]
        missing = [i for i, result in enumerate(results) if isinstance(result, NoScriptError)]
        if missing:  # the node restarted and forgot the scripts: load them, send again
            for script in {calls[i][0] for i in missing}:
                await node.execute_command("SCRIPT", "LOAD", script.script)
            again = [_evalsha(i, calls[i]) for i in missing]
            await node.execute_pipeline(again)
            for command in again:
                results[command.position] = command.result
        return results

    def close(self) -> None:
        self.layout.cancel()


def _evalsha(position: int, call: Call) -> PipelineCommand:
    script, keys, args = call
    return PipelineCommand(position, "EVALSHA", script.sha, len(keys), *keys, *args)
