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

How the calls travel, batched by event-loop turn (and by node on a cluster), is
``jobrail.limits.redis_calls``.

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

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from redis.asyncio import Redis, RedisCluster
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

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
from jobrail.limits.redis_calls import ScriptCalls
from jobrail.limits.redis_errors import unreachable
from jobrail.settings import RedisSettings

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


def _retry(value_ms: float) -> timedelta | None:
    return timedelta(milliseconds=value_ms)


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
        self._prefix = key_prefix
        built = scripts.build(kinds)
        self._admit = redis.register_script(built.admit)
        self._release = redis.register_script(built.release)
        self._extend = redis.register_script(built.extend)
        self._holders = redis.register_script(built.holders)
        self._fenced = redis.register_script(FENCED_WRITE)
        # The batched form of a script, by the script (see jobrail.limits.redis_calls).
        self._batched: dict[Any, Any] = {}
        if not isinstance(redis, RedisCluster):
            self._batched = {
                self._admit: redis.register_script(built.admit_batch),
                self._release: redis.register_script(built.release_batch),
                self._extend: redis.register_script(built.extend_batch),
            }
        self._calls = ScriptCalls(redis, window_s, self._batched)
        self._call = self._calls.call

    async def load_scripts(self) -> None:
        """Load every script now (EVALSHA would otherwise load each on first use)."""
        try:
            scripts = (self._admit, self._release, self._extend, self._holders, self._fenced)
            for script in (*scripts, *self._batched.values()):
                script.sha = await self._redis.script_load(script.script)
        except Exception as exc:
            if not unreachable(exc):
                raise
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
            ok, remaining, retry, reserved, epoch, own, until, who = raw[3 + 8 * i : 11 + 8 * i]
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
                    holder=_text(who) or None,
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
        except Exception as exc:
            if not unreachable(exc):
                raise
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
        self._calls.close()
        await self._redis.aclose()


def redis_client(settings: RedisSettings) -> "Redis | RedisCluster":
    """The limits' Redis client: one server, or a Redis Cluster found from one node.

    A dead connection fails the command, which the limits treat as "Redis is away"
    (limited work waits and comes back); no ping before commands, no silent retries.
    On a cluster, the limits' scripts go to each node on its own
    (``jobrail.limits.redis_nodes``), which reads the layout again after a node failed;
    the client does not require every slot to be served (``require_full_coverage``):
    with a shard down, the keys of the other shards are still routed."""
    options: dict[str, Any] = {
        "socket_timeout": settings.socket_timeout_s,
        "socket_connect_timeout": settings.socket_timeout_s,
        "health_check_interval": 0,
    }
    url = settings.url.get_secret_value()
    if settings.cluster:
        return RedisCluster.from_url(
            url, retry=Retry(NoBackoff(), 0), require_full_coverage=False, **options
        )
    return Redis.from_url(url, retry=None, **options)
