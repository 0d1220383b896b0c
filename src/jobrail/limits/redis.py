"""The Redis limits backend: every operation is one Lua script, one round trip.

Scripts are loaded once and run with EVALSHA (redis-py's ``Script`` reloads them
if Redis restarted). Time comes from Redis ``TIME``, so workers with skewed clocks
still agree. Every semantic deadline (a lock's end, a lease's end, a bucket's
theoretical arrival time, a window entry's age) is stored as a timestamp and
compared with that time; key TTLs only collect garbage and are never shorter than
the state they hold.

The scripts are made of the limit kinds' Lua fragments (``jobrail.limits.scripts``);
here they are only sent. Keys (``LimitKind.redis_keys``): ``{prefix}{kind}:{key}`` with
kind ``tb`` (token bucket), ``sw`` (sliding window), ``cs`` (concurrency slots), ``lk``
(lock) and ``fence`` (a lock's fencing counter), the key written with its owner in
braces, a Redis Cluster hash tag (``vendor:{acme}``; see
``jobrail.limits.model.hash_tagged``). The client may be a ``RedisCluster``: every
script's keys are then on one slot (a job type whose keys would not be is refused at
start-up), and the calls batched together go to each node as a pipeline of their own.

On a plain Redis, the calls of one event-loop turn are one batch, and the calls of one
script in a batch (the admissions of many jobs, say) are one command: the batched form
of the script (``jobrail.limits.scripts``), which runs each call as it would run alone
and answers each with its own result or error. The client then packs one command and
parses one reply where it would handle one per call, and packs a call's arguments as
one (redis-py packs each argument in Python: that was most of what a call cost the
worker). A cluster cannot take that: a batch's keys lie on many slots.

Redis may lose everything (the compose file runs it without persistence). Two things
must survive that, and neither may rely on a key having survived:

- **Reservations.** A job a token bucket turns away reserves the bucket's next token
  and comes back when it is due, prepaid. If the prepaid label were honoured without
  looking at the bucket, then after a data loss the fresh bucket would give out its
  whole burst and rate while every old reservation was honoured as well: twice the
  rate. So a bucket's value is ``tat|epoch``, the epoch naming the bucket's current
  state: it is made (a digest of the unique holder token of the admission that found
  the bucket full) whenever the bucket starts from full. A reservation names its epoch
  and is honoured only in that same state; no clock is involved, so a new state never
  has an old state's epoch. A bucket that is lost, reset, or refilled
  completely starts a new epoch, and the job competes for a token again (a refill
  that complete means it came back more than a whole burst late anyway). Refunds go
  back only to the epoch they were charged in. A reservation also names until when it
  may be used, in Redis's time (``jobrail.limits.kinds.token_bucket``), so whether a
  job came back in time for it does not depend on the workers' clocks either.
- **Fencing tokens.** The fence of a lock is ``max(last fence + 1, now in µs)``. The
  counter alone restarts at 1 after a data loss; Redis's clock alone may repeat
  within a microsecond. Their maximum stays monotonic across a loss as long as
  Redis's clock does not go back by more than the time between the last fence
  before the loss and the first after it (a restart takes far longer than the
  counter can run ahead of the clock: one admission is more than a microsecond of
  script). It assumes a clock kept by NTP, not stepped back, and, after a failover
  to another Redis host, clocks that agree to better than the failover takes. The
  fencing counter's key only breaks ties within a microsecond and guards against
  small slews while Redis keeps its data.
"""

import contextlib
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from redis.asyncio import Redis, RedisCluster
from redis.crc import key_slot
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError, RedisClusterException, RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError

from jobrail.kernel.batching import Coalescer
from jobrail.limits import scripts
from jobrail.limits.kind import LimitKind, num
from jobrail.limits.kinds.lock import FENCE_TTL_MS
from jobrail.limits.model import (
    KINDS,
    Acquire,
    Admission,
    Decision,
    Grant,
    LimitsUnavailableError,
    hash_tagged,
)

# KEYS: resource. ARGV: fence, value. A write with an older fence than the last is refused.
FENCED_WRITE = (
    """
local current = redis.call('HGET', KEYS[1], 'fence')
if current and tonumber(current) > tonumber(ARGV[1]) then return 0 end
redis.call('HSET', KEYS[1], 'fence', ARGV[1], 'value', ARGV[2])
redis.call('PEXPIRE', KEYS[1], """
    + str(FENCE_TTL_MS)
    + """)
return 1
"""
)


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _evalsha(pipe: Any, script: Any, keys: list[str], args: list[str]) -> None:
    # The raw command, not `pipe.evalsha`: redis-py refuses that method on a cluster
    # pipeline (a list of blocked commands shared with its synchronous client), though
    # its asyncio cluster pipeline routes EVALSHA by the script's keys, as a cluster
    # client's own EVALSHA does. On a plain pipeline the two are the same command.
    pipe.execute_command("EVALSHA", script.sha, len(keys), *keys, *args)


def _retry(value_ms: float) -> timedelta | None:
    return timedelta(milliseconds=value_ms)


class CrossSlotError(ValueError):
    """The keys of one call lie on different slots of the Redis Cluster."""


# What a Redis that cannot answer raises. A RedisClusterException is what redis-py
# raises when it reaches no node of the cluster (keys on two slots are caught before).
_UNREACHABLE = (RedisConnectionError, RedisTimeoutError, RedisClusterException, OSError)


class RedisLimits:
    def __init__(
        self,
        redis: Redis | RedisCluster,
        key_prefix: str = "jobrail:",
        window_s: float = 0.0,
        kinds: Sequence[type[LimitKind[Any]]] = KINDS,
    ) -> None:
        """`kinds`: the limit kinds the scripts know (every kind by default)."""
        self._redis = redis
        self._cluster = redis if isinstance(redis, RedisCluster) else None
        self._prefix = key_prefix
        built = scripts.build(kinds)
        self._admit = redis.register_script(built.admit)
        self._release = redis.register_script(built.release)
        self._extend = redis.register_script(built.extend)
        self._holders = redis.register_script(built.holders)
        self._fenced = redis.register_script(FENCED_WRITE)
        # The batched form of a script, by the script (see _send).
        self._batched: dict[Any, Any] = {}
        if self._cluster is None:
            self._batched = {
                self._admit: redis.register_script(built.admit_batch),
                self._release: redis.register_script(built.release_batch),
                self._extend: redis.register_script(built.extend_batch),
            }
        # Scripts called in the same loop turn go out together: one command per script
        # called (see _send), one write and one read for them all.
        self._calls: Coalescer[tuple[Any, list[str], list[str]], Any] = Coalescer(
            self._send, window_s
        )
        # On a cluster, one batch per node (see _node_batch).
        self._window_s = window_s
        self._node_batches: dict[str, Coalescer[tuple[Any, list[str], list[str]], Any]] = {}

    async def load_scripts(self) -> None:
        """Load every script now (EVALSHA would otherwise load each on first use)."""
        try:
            scripts = (self._admit, self._release, self._extend, self._holders, self._fenced)
            for script in (*scripts, *self._batched.values()):
                script.sha = await self._redis.script_load(script.script)
        except _UNREACHABLE as exc:
            raise LimitsUnavailableError(f"Redis unavailable: {exc}") from exc

    def key(self, item: Acquire) -> str:
        """The Redis key holding `item`'s state."""
        return self._item_keys(item)[0]

    def _item_keys(self, item: Acquire) -> list[str]:
        return item.limit.redis_keys(self._prefix, item.key)

    def _keys(self, items: Sequence[Acquire]) -> list[str]:
        return [key for item in items for key in self._item_keys(item)]

    def _items(
        self, items: Sequence[Acquire], arguments: Sequence[list[str]]
    ) -> tuple[list[str], list[str]]:
        """The keys and the per-item arguments of a script call over `items`: each item's
        kind, the number of its keys, then `arguments` (the kind's own)."""
        keys: list[str] = []
        args: list[str] = []
        for item, own in zip(items, arguments, strict=True):
            item_keys = self._item_keys(item)
            keys += item_keys
            args += [item.limit.kind, str(len(item_keys)), *own]
        return keys, args

    async def _node_batch(
        self, cluster: RedisCluster, keys: list[str]
    ) -> Coalescer[tuple[Any, list[str], list[str]], Any]:
        """The batch of the node that serves `keys`. redis-py's cluster pipeline would
        split one batch by node itself, but a node that fails or does not answer would
        fail or hold up all of it; batched by node, it holds back only its own calls.
        (A call whose slot moved meanwhile still reaches the right node: the pipeline
        routes every command by its keys and follows redirections.)"""
        await cluster.initialize()  # reads the cluster's layout when needed; else a no-op
        node = cluster.get_node_from_key(keys[0])
        if node is None:
            raise RedisClusterException(f"no node serves the key {keys[0]!r}")
        batch = self._node_batches.get(node.name)
        if batch is None:
            batch = self._node_batches[node.name] = Coalescer(
                lambda calls: self._send_to_cluster(cluster, calls), self._window_s
            )
        return batch

    async def _send_to_cluster(
        self, cluster: RedisCluster, calls: Sequence[tuple[Any, list[str], list[str]]]
    ) -> list[Any]:
        try:
            results = await self._send_each(calls)
        except RedisCluster.ERRORS_ALLOW_RETRY:
            await self._layout_changed(cluster)
            raise
        if any(isinstance(result, RedisCluster.ERRORS_ALLOW_RETRY) for result in results):
            await self._layout_changed(cluster)
        return results

    @staticmethod
    async def _layout_changed(cluster: RedisCluster) -> None:
        # A node failed (or the cluster is changing): read its layout again, or the
        # pipelines would go on to a dead master after its replica took over. A single
        # command makes redis-py do this itself; a pipeline only when it retries, and
        # the limits' client never retries (see jobrail.runtime.container). Not `aclose()`, which is
        # what redis-py's retry does: that would also cut the connections the other
        # nodes' batches are using. The nodes manager keeps them, and runs one refresh
        # for callers that fail at the same time.
        with contextlib.suppress(RedisError, RedisClusterException, OSError):
            await cluster.nodes_manager.initialize()  # fails again while no node answers

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

    async def _call(self, script: Any, keys: list[str], args: list[str]) -> Any:
        if self._cluster is not None and len({key_slot(key.encode()) for key in keys}) > 1:
            # Redis would refuse it (CROSSSLOT), and redis-py would fail the whole batch
            # it is in; start-up checks make this a bug in the caller, so say so.
            raise CrossSlotError(
                f"keys {keys} lie on different Redis Cluster slots; one script needs one "
                "slot (see jobrail.limits.model.hash_tagged)"
            )
        try:
            if self._cluster is None:
                return await self._calls.submit((script, keys, args))
            batch = await self._node_batch(self._cluster, keys)
            return await batch.submit((script, keys, args))
        except (RedisError, RedisClusterException, OSError) as exc:
            # Down, loading, read-only, out of memory: the limits cannot be checked, so
            # limited work waits (and is never run unprotected).
            raise LimitsUnavailableError(f"Redis unavailable: {type(exc).__name__}: {exc}") from exc

    async def admit(
        self,
        items: Sequence[Acquire],
        holder: str,
        *,
        reserve: bool = False,
        now_ms: float | None = None,
        owner: str = "",
        take_over: bool = False,
    ) -> Admission:
        return await self._run_admit(
            items,
            holder,
            now_ms,
            dry_run=False,
            reserve=reserve,
            owner=owner,
            take_over=take_over,
        )

    async def _run_admit(
        self,
        items: Sequence[Acquire],
        holder: str,
        now_ms: float | None,
        *,
        dry_run: bool,
        reserve: bool = False,
        owner: str = "",
        take_over: bool = False,
    ) -> Admission:
        args = ["" if now_ms is None else num(now_ms), holder, "1" if dry_run else "0"]
        args += ["1" if reserve else "0", str(len(items)), owner, "1" if take_over else "0"]
        keys, per_item = self._items(items, [i.limit.admit_args(i.prepaid) for i in items])
        raw = await self._call(self._admit, keys, args + per_item)
        allowed = int(raw[0]) == 1
        fence = int(raw[1]) if raw[1] not in (b"", "") else None
        decisions = []
        for i, item in enumerate(items):
            ok, remaining, retry, reserved, epoch, own, until = raw[3 + 7 * i : 10 + 7 * i]
            granted = int(ok) == 1
            decisions.append(
                Decision(
                    name=item.limit.name,
                    allowed=granted,
                    remaining=float(remaining),
                    retry_after=None if granted else _retry(float(retry)),
                    reserved=int(reserved) == 1,
                    epoch=_text(epoch) or None,
                    own=int(own) == 1,
                    until=float(until) if until not in (b"", "") else None,
                )
            )
        grant = None
        if allowed and not dry_run:
            epochs = tuple(d.epoch for d in decisions)
            grant = Grant(items=tuple(items), holder=holder, fence=fence, epochs=epochs)
        return Admission(allowed=allowed, decisions=decisions, grant=grant, now_ms=float(raw[2]))

    async def release(
        self, grant: Grant, *, refund: bool = False, now_ms: float | None = None
    ) -> None:
        epochs = list(grant.epochs) or [None] * len(grant.items)
        own = [
            item.limit.release_args(epoch) for item, epoch in zip(grant.items, epochs, strict=True)
        ]
        keys, per_item = self._items(grant.items, own)
        args = ["1" if refund else "0", grant.holder, str(len(grant.items)), *per_item]
        await self._call(self._release, keys, args)

    async def extend(self, grant: Grant, *, now_ms: float | None = None) -> bool:
        held = [(i, ttl) for i in grant.items if (ttl := i.limit.hold_ttl_s) is not None]
        if not held:
            return True
        keys, per_item = self._items([i for i, _ in held], [[num(ttl * 1000)] for _, ttl in held])
        args = ["" if now_ms is None else num(now_ms), grant.holder, str(len(held)), *per_item]
        result = await self._call(self._extend, keys, args)
        return int(result) == 1

    async def peek(self, item: Acquire, *, now_ms: float | None = None) -> Decision:
        return (await self.peek_all([item], now_ms=now_ms))[0]

    async def peek_all(
        self, items: Sequence[Acquire], *, now_ms: float | None = None
    ) -> list[Decision]:
        admission = await self._run_admit(items, "peek", now_ms, dry_run=True)
        return list(admission.decisions)

    async def reset(self, item: Acquire) -> None:
        try:
            await self._redis.delete(self.key(item))
        except _UNREACHABLE as exc:
            raise LimitsUnavailableError(f"Redis unavailable: {exc}") from exc

    async def holders(self, item: Acquire) -> list[dict[str, Any]]:
        """Who holds a lock or the slots of a concurrency limit (for operators)."""
        flat = await self._call(self._holders, self._item_keys(item), [item.limit.kind])
        pairs = zip(flat[::2], flat[1::2], strict=True)
        return [{"holder": _text(holder), "until_ms": float(until)} for holder, until in pairs]

    async def fenced_write(
        self, resource: str, fence: int, value: str, *, now_ms: float | None = None
    ) -> bool:
        key = f"{self._prefix}fenced:{hash_tagged(resource)}"
        return int(await self._call(self._fenced, [key], [str(fence), value])) == 1

    async def fenced_value(self, resource: str) -> tuple[int, str] | None:
        data: Any = await self._redis.hgetall(f"{self._prefix}fenced:{hash_tagged(resource)}")
        if not data:
            return None
        return int(data[b"fence"]), _text(data[b"value"])

    async def close(self) -> None:
        await self._redis.aclose()
