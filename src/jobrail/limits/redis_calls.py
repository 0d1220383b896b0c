"""How the limits' scripts travel to Redis: the calls of one event-loop turn together.

On a plain Redis, the calls of one turn are one batch, and the calls of one script in a
batch (the admissions of many jobs, say) are one command: the batched form of the script
(``jobrail.limits.scripts``), which runs each call as it would run alone and answers
each with its own result or error. The client then packs one command and parses one
reply where it would handle one per call. A Redis Cluster cannot take that (a batch's
keys lie on many slots): there the calls go to each node as a pipeline of their own, so
that a node that fails holds back only its own calls (``jobrail.limits.redis_nodes``).
Any error that says Redis cannot answer (``jobrail.limits.redis_errors``) fails the call
with ``LimitsUnavailableError``.
"""

from collections.abc import Sequence
from typing import Any

from redis.asyncio import Redis, RedisCluster
from redis.crc import key_slot
from redis.exceptions import NoScriptError, RedisError

from jobrail.kernel.batching import Coalescer
from jobrail.limits import scripts
from jobrail.limits.model import LimitsUnavailableError
from jobrail.limits.redis_errors import unreachable
from jobrail.limits.redis_nodes import NodeCalls


class CrossSlotError(ValueError):
    """The keys of one call lie on different slots of the Redis Cluster."""


def _evalsha(pipe: Any, script: Any, keys: list[str], args: list[str]) -> None:
    # The raw command, as the cluster's node pipelines send it (jobrail.limits.redis_nodes).
    pipe.execute_command("EVALSHA", script.sha, len(keys), *keys, *args)


class ScriptCalls:
    """Calls of Redis scripts, each answered with its own result: batched by event-loop
    turn (and by node on a cluster). `batched`: a script's batched form, by the script
    (plain Redis only)."""

    def __init__(
        self, redis: Redis | RedisCluster, window_s: float, batched: dict[Any, Any]
    ) -> None:
        self._redis = redis
        self._cluster = redis if isinstance(redis, RedisCluster) else None
        self._batched = batched
        # Scripts called in the same loop turn go out together: one command per script
        # called (see _send), one write and one read for them all.
        self._calls: Coalescer[tuple[Any, list[str], list[str]], Any] = Coalescer(
            self._send, window_s
        )
        # On a cluster, one batch per node, sent to that node only.
        self._nodes = NodeCalls(self._cluster, window_s) if self._cluster is not None else None

    async def _send(self, calls: Sequence[tuple[Any, list[str], list[str]]]) -> list[Any]:
        """Send a batch of calls to a plain Redis: the calls of a script that has a
        batched form go as one command of that form when there are several of them."""
        by_script: dict[Any, list[int]] = {}
        for i, (script, _, _) in enumerate(calls):
            by_script.setdefault(script, []).append(i)
        commands: list[tuple[Any, list[str], list[str]]] = []
        answers: list[list[int] | int] = []  # per command: its calls, or its one call
        for script, indexes in by_script.items():
            batched = self._batched.get(script)
            joined: dict[int, str] = {}  # the calls that go in the batched command
            if batched is not None and len(indexes) > 1:
                for i in indexes:
                    if (arguments := scripts.joined(calls[i][2])) is not None:
                        joined[i] = arguments
            if len(joined) > 1:
                keys, args = scripts.batch_args([(calls[i][1], a) for i, a in joined.items()])
                commands.append((batched, keys, args))
                answers.append(list(joined))
            else:
                joined = {}
            alone = [i for i in indexes if i not in joined]
            commands += [calls[i] for i in alone]
            answers += alone
        results: list[Any] = [None] * len(calls)
        for answer, result in zip(answers, await self._send_each(commands), strict=True):
            if isinstance(answer, int):
                results[answer] = result
            elif isinstance(result, BaseException):  # the whole command failed
                for i in answer:
                    results[i] = result
            else:
                for i, one in zip(answer, result, strict=True):
                    results[i] = one
        return results

    async def _send_each(self, calls: Sequence[tuple[Any, list[str], list[str]]]) -> list[Any]:
        """Send each call as a command of its own, in one pipeline."""
        if len(calls) == 1:  # alone in its turn: a plain call costs less than a pipeline
            script, keys, args = calls[0]
            try:
                return [await script(keys=keys, args=args)]
            except RedisError as exc:
                return [exc]
        pipe = self._redis.pipeline(transaction=False)
        for script, keys, args in calls:
            _evalsha(pipe, script, keys, args)
        results: list[Any] = await pipe.execute(raise_on_error=False)
        missing = [i for i, result in enumerate(results) if isinstance(result, NoScriptError)]
        if missing:  # Redis restarted and forgot the scripts: load them, send again
            for script in {calls[i][0] for i in missing}:
                script.sha = await self._redis.script_load(script.script)
            pipe = self._redis.pipeline(transaction=False)
            for i in missing:
                script, keys, args = calls[i]
                _evalsha(pipe, script, keys, args)
            for i, result in zip(missing, await pipe.execute(raise_on_error=False), strict=True):
                results[i] = result
        return results

    async def call(self, script: Any, keys: list[str], args: list[str]) -> Any:
        if self._cluster is not None and len({key_slot(key.encode()) for key in keys}) > 1:
            # Redis would refuse it (CROSSSLOT), and redis-py would fail the whole batch
            # it is in; start-up checks make this a bug in the caller, so say so.
            raise CrossSlotError(
                f"keys {keys} lie on different Redis Cluster slots; one script needs one "
                "slot (see jobrail.limits.model.hash_tagged)"
            )
        try:
            if self._nodes is None:
                return await self._calls.submit((script, keys, args))
            return await self._nodes.call(script, keys, args)
        except Exception as exc:
            if not unreachable(exc):
                raise
            # Down, loading, read-only, out of memory, failing over: the limits cannot be
            # checked, so limited work waits (and is never run unprotected).
            raise LimitsUnavailableError(f"Redis unavailable: {type(exc).__name__}: {exc}") from exc

    def close(self) -> None:
        if self._nodes is not None:
            self._nodes.close()
