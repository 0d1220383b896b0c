"""The Redis limits backend: every operation is one Lua script, one round trip.

Scripts are loaded once and run with EVALSHA (redis-py's ``Script`` reloads them
if Redis restarted). Time comes from Redis ``TIME``, so workers with skewed clocks
still agree. Every semantic deadline (a lock's end, a lease's end, a bucket's
theoretical arrival time, a window entry's age) is stored as a timestamp and
compared with that time; key TTLs only collect garbage and are never shorter than
the state they hold.

Keys: ``{prefix}{kind}:{key}`` with kind ``tb`` (token bucket), ``sw`` (sliding
window), ``cs`` (concurrency slots), ``lk`` (lock) and ``fence`` (fencing counter), the
key written with its owner in braces, a Redis Cluster hash tag (``vendor:{acme}``; see
``jobrail.limits.model.hash_tagged``). The client may be a ``RedisCluster``: every
script's keys are then on one slot (a job type whose keys would not be is refused at
start-up), and the calls batched together go to each node as a pipeline of their own.

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
  back only to the epoch they were charged in.
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

from jobrail.batching import Coalescer
from jobrail.limits.model import (
    Acquire,
    Admission,
    Concurrency,
    Decision,
    Grant,
    LimitsUnavailableError,
    Lock,
    SlidingWindow,
    TokenBucket,
    hash_tagged,
)

FENCE_TTL_MS = 30 * 24 * 3600 * 1000

_NOW = """
local function clock(override)
  if override ~= '' then
    local ms = tonumber(override)
    return ms, math.floor(ms * 1000)
  end
  local t = redis.call('TIME')
  local s, us = tonumber(t[1]), tonumber(t[2])
  return s * 1000 + us / 1000, s * 1000000 + us
end
local function now_ms(override)
  local ms = clock(override)
  return ms
end
local function num(x) return string.format('%.17g', x) end
local function gc(key, ms) redis.call('PEXPIRE', key, math.max(1, math.ceil(ms)) + 1000) end
"""

# ARGV: now_override, holder, dry_run, reserve, n, owner, take_over, then per item: kind
# + 4 params.
# KEYS: per item one key; a lock also has its fence key right after it.
# A token bucket's value is 'tat|epoch': its theoretical arrival time (ms) and the id of
# its current state (a digest of the holder that started it, as in memory.py). A token
# bucket item whose p4 names the bucket's epoch was paid for by a reservation made in
# that state; any other p4 competes as usual.
# With reserve = '1', a denied admission reserves the next token of each token bucket
# that said no (its caller comes back when the token is due, prepaid with the epoch).
# A lock or slots held by holders starting with `owner` (an earlier admission of the same
# job: '<job id>/') are taken from them with take_over = '1', else reported as `own`.
# Out: allowed, fence, then per item: ok, remaining, retry_after, reserved, epoch, own.
ADMIT = (
    _NOW
    + """
local now, now_us = clock(ARGV[1])
local holder, dry, reserve, n = ARGV[2], ARGV[3] == '1', ARGV[4] == '1', tonumber(ARGV[5])
local owner, take = ARGV[6], ARGV[7] == '1'
local function owned(who) return owner ~= '' and string.sub(who, 1, #owner) == owner end
local out, plans, reservations, all = {}, {}, {}, true
local a, k = 8, 1
for i = 1, n do
  local kind, p1, p2, p3, p4 = ARGV[a], ARGV[a + 1], ARGV[a + 2], ARGV[a + 3], ARGV[a + 4]
  a = a + 5
  local key = KEYS[k]
  k = k + 1
  local ok, remaining, retry, reserved, epoch, own = 1, 0, 0, 0, '', 0
  if kind == 'tb' then
    -- A bucket that is absent (never used, expired, lost with Redis's data) or whose
    -- TAT has passed is full: a new state, with a new epoch, begins now.
    local tat, state, e = now, redis.call('GET', key), nil
    if state then
      local t
      t, e = string.match(state, '^([^|]*)|(.*)$')
      t = tonumber(t or state) -- a value from before epochs is a bare TAT: keep it
      if t and t > now then tat = t else e = nil end
    end
    epoch = e or string.sub(redis.sha1hex(holder), 1, 16)
    local cap, per_s, cost = tonumber(p1), tonumber(p2), tonumber(p3)
    local interval = 1000 / per_s
    local tau = cap * interval
    if p4 ~= '' and p4 == epoch then
      remaining = 0 -- reserved in this very state: already paid for
    else
      local new_tat = tat + cost * interval
      local allow_at = new_tat - tau
      if allow_at <= now then
        remaining = math.floor((now - allow_at) / interval + 1e-9)
        plans[#plans + 1] = {'tb', key, new_tat, epoch}
      else
        ok, retry = 0, allow_at - now
        remaining = math.max(0, math.floor((now - (tat - tau)) / interval + 1e-9))
        if reserve then
          reserved = 1
          reservations[#reservations + 1] = {key, new_tat, epoch}
        end
      end
    end
  elseif kind == 'sw' then
    local limit, window, cost = tonumber(p1), tonumber(p2), tonumber(p3)
    redis.call('ZREMRANGEBYSCORE', key, '-inf', num(now - window))
    local count = redis.call('ZCARD', key)
    if count + cost <= limit then
      remaining = limit - count - cost
      plans[#plans + 1] = {'sw', key, cost, window}
    else
      local idx = count + cost - limit - 1
      local oldest = redis.call('ZRANGE', key, idx, idx, 'WITHSCORES')
      ok, retry = 0, tonumber(oldest[2]) + window - now
      remaining = math.max(0, limit - count)
    end
  elseif kind == 'cs' then
    local slots, lease = tonumber(p1), tonumber(p2)
    redis.call('ZREMRANGEBYSCORE', key, '-inf', num(now))
    local count = redis.call('ZCARD', key)
    -- The owner's own slots, looked for only when they would make the difference.
    local mine = {}
    if count >= slots and owner ~= '' then
      for _, member in ipairs(redis.call('ZRANGE', key, 0, -1)) do
        if owned(member) then mine[#mine + 1] = member end
      end
    end
    if count < slots or (take and count - #mine < slots) then
      remaining = slots - (count - #mine) - 1
      plans[#plans + 1] = {'cs', key, lease, mine}
    else
      local first = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
      ok, retry = 0, tonumber(first[2]) - now
      if #mine > 0 and count - #mine < slots then own = 1 end
    end
  else -- 'lk'
    local ttl = tonumber(p1)
    local fence_key = KEYS[k]
    k = k + 1
    local current = redis.call('GET', key)
    local ends = current and tonumber(string.match(current, '^([^|]+)|')) or nil
    local mine = ends and ends > now and owned(string.match(current, '|(.*)$'))
    if ends and ends > now and not (take and mine) then
      ok, retry = 0, ends - now
      if mine then own = 1 end
    else
      plans[#plans + 1] = {'lk', key, ttl, fence_key}
    end
  end
  if ok == 0 then all = false end
  out[#out + 1] = ok
  out[#out + 1] = num(remaining)
  out[#out + 1] = num(retry)
  out[#out + 1] = reserved
  out[#out + 1] = epoch
  out[#out + 1] = own
end
local fence = ''
if not all and not dry then
  for _, r in ipairs(reservations) do
    redis.call('SET', r[1], num(r[2]) .. '|' .. r[3])
    gc(r[1], r[2] - now)
  end
end
if all and not dry then
  for _, p in ipairs(plans) do
    if p[1] == 'tb' then
      redis.call('SET', p[2], num(p[3]) .. '|' .. p[4])
      gc(p[2], p[3] - now)
    elseif p[1] == 'sw' then
      for j = 1, p[3] do redis.call('ZADD', p[2], num(now), holder .. ':' .. j) end
      gc(p[2], p[4])
    elseif p[1] == 'cs' then
      for _, member in ipairs(p[4]) do redis.call('ZREM', p[2], member) end
      redis.call('ZADD', p[2], num(now + p[3]), holder)
      local ttl = redis.call('PTTL', p[2])
      if ttl < p[3] + 1000 then gc(p[2], p[3]) end
    else
      redis.call('SET', p[2], num(now + p[3]) .. '|' .. holder)
      gc(p[2], p[3])
      -- The counter alone would start again from 1 after Redis lost its data; the
      -- clock (us) alone could repeat within a microsecond. Their maximum only grows
      -- while the clock does not go back by more than the time since the last fence
      -- (see the module docstring).
      local f = math.max(tonumber(redis.call('GET', p[4]) or 0) + 1, now_us)
      fence = string.format('%.0f', f)
      redis.call('SET', p[4], fence, 'PX', """
    + str(FENCE_TTL_MS)
    + """)
    end
  end
end
table.insert(out, 1, fence)
table.insert(out, 1, all and 1 or 0)
return out
"""
)

# ARGV: refund, holder, n, then per item: kind + 3 params. KEYS: one per item.
# A token bucket's refund goes back only to the state (epoch, p3) it was charged in.
RELEASE = """
local refund, holder, n = ARGV[1] == '1', ARGV[2], tonumber(ARGV[3])
local a = 4
for i = 1, n do
  local kind, p1, p2, p3 = ARGV[a], ARGV[a + 1], ARGV[a + 2], ARGV[a + 3]
  a = a + 4
  local key = KEYS[i]
  if kind == 'tb' and refund then
    local state = redis.call('GET', key)
    local tat, epoch = nil, nil
    if state then tat, epoch = string.match(state, '^([^|]*)|(.*)$') end
    if tat and epoch == p3 then
      local ttl = redis.call('PTTL', key)
      local refunded = tonumber(tat) - tonumber(p1) * 1000 / tonumber(p2)
      redis.call('SET', key, string.format('%.17g', refunded) .. '|' .. epoch)
      if ttl > 0 then redis.call('PEXPIRE', key, ttl) end
    end
  elseif kind == 'sw' and refund then
    for j = 1, tonumber(p1) do redis.call('ZREM', key, holder .. ':' .. j) end
  elseif kind == 'cs' then
    redis.call('ZREM', key, holder)
  elseif kind == 'lk' then
    local current = redis.call('GET', key)
    if current and string.match(current, '|(.*)$') == holder then redis.call('DEL', key) end
  end
end
return 1
"""

# ARGV: now_override, holder, n, then per item: kind + ttl_ms. KEYS: one per item.
EXTEND = (
    _NOW
    + """
local now = now_ms(ARGV[1])
local holder, n = ARGV[2], tonumber(ARGV[3])
local held = 1
for i = 1, n do
  local kind, ttl = ARGV[2 + 2 * i], tonumber(ARGV[3 + 2 * i])
  local key = KEYS[i]
  if kind == 'lk' then
    local current = redis.call('GET', key)
    local ends = current and tonumber(string.match(current, '^([^|]+)|')) or nil
    if current and string.match(current, '|(.*)$') == holder and ends > now then
      redis.call('SET', key, num(now + ttl) .. '|' .. holder)
      gc(key, ttl)
    else
      held = 0
    end
  else
    local score = redis.call('ZSCORE', key, holder)
    local ends = score and tonumber(score) or nil
    if ends and ends > now then
      redis.call('ZADD', key, 'XX', num(now + ttl), holder)
      local pttl = redis.call('PTTL', key)
      if pttl < ttl + 1000 then gc(key, ttl) end
    else
      held = 0
    end
  end
end
return held
"""
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


def _params(item: Acquire) -> list[str]:
    limit = item.limit
    if isinstance(limit, TokenBucket):
        prepaid = item.prepaid or ""
        return [_num(limit.capacity), _num(limit.per_second), _num(limit.cost), prepaid]
    if isinstance(limit, SlidingWindow):
        return [str(limit.limit), _num(limit.window_s * 1000), str(limit.cost), ""]
    if isinstance(limit, Concurrency):
        return [str(limit.slots), _num(limit.lease_s * 1000), "", ""]
    assert isinstance(limit, Lock)
    return [_num(limit.ttl_s * 1000), "", "", ""]


def _num(value: float) -> str:
    return repr(float(value))


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
        self, redis: Redis | RedisCluster, key_prefix: str = "jobrail:", window_s: float = 0.0
    ) -> None:
        self._redis = redis
        self._cluster = redis if isinstance(redis, RedisCluster) else None
        self._prefix = key_prefix
        self._admit = redis.register_script(ADMIT)
        self._release = redis.register_script(RELEASE)
        self._extend = redis.register_script(EXTEND)
        self._fenced = redis.register_script(FENCED_WRITE)
        # Scripts called in the same loop turn go out as one pipeline: still one
        # command per call, one write and one read for them all.
        self._calls: Coalescer[tuple[Any, list[str], list[str]], Any] = Coalescer(
            self._send, window_s
        )
        # On a cluster, one batch per node (see _node_batch).
        self._window_s = window_s
        self._node_batches: dict[str, Coalescer[tuple[Any, list[str], list[str]], Any]] = {}

    async def load_scripts(self) -> None:
        """Load every script now (EVALSHA would otherwise load each on first use)."""
        try:
            for script in (self._admit, self._release, self._extend, self._fenced):
                script.sha = await self._redis.script_load(script.script)
        except _UNREACHABLE as exc:
            raise LimitsUnavailableError(f"Redis unavailable: {exc}") from exc

    def key(self, item: Acquire) -> str:
        return f"{self._prefix}{item.limit.kind}:{hash_tagged(item.key)}"

    def _keys(self, items: Sequence[Acquire]) -> list[str]:
        keys = []
        for item in items:
            keys.append(self.key(item))
            if isinstance(item.limit, Lock):
                keys.append(f"{self._prefix}fence:{hash_tagged(item.key)}")
        return keys

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
            results = await self._send(calls)
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
        # the limits' client never retries (see jobrail.ioc). Not `aclose()`, which is
        # what redis-py's retry does: that would also cut the connections the other
        # nodes' batches are using. The nodes manager keeps them, and runs one refresh
        # for callers that fail at the same time.
        with contextlib.suppress(RedisError, RedisClusterException, OSError):
            await cluster.nodes_manager.initialize()  # fails again while no node answers

    async def _send(self, calls: Sequence[tuple[Any, list[str], list[str]]]) -> list[Any]:
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
        args = ["" if now_ms is None else _num(now_ms), holder, "1" if dry_run else "0"]
        args += ["1" if reserve else "0", str(len(items)), owner, "1" if take_over else "0"]
        for item in items:
            args.append(item.limit.kind)
            args.extend(_params(item))
        raw = await self._call(self._admit, self._keys(items), args)
        allowed = int(raw[0]) == 1
        fence = int(raw[1]) if raw[1] not in (b"", "") else None
        decisions = []
        for i, item in enumerate(items):
            ok, remaining, retry, reserved, epoch, own = raw[2 + 6 * i : 8 + 6 * i]
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
                )
            )
        grant = None
        if allowed and not dry_run:
            epochs = tuple(d.epoch for d in decisions)
            grant = Grant(items=tuple(items), holder=holder, fence=fence, epochs=epochs)
        return Admission(allowed=allowed, decisions=decisions, grant=grant)

    async def release(
        self, grant: Grant, *, refund: bool = False, now_ms: float | None = None
    ) -> None:
        args = ["1" if refund else "0", grant.holder, str(len(grant.items))]
        epochs = list(grant.epochs) or [None] * len(grant.items)
        for item, epoch in zip(grant.items, epochs, strict=True):
            limit = item.limit
            if isinstance(limit, TokenBucket):
                args += ["tb", _num(limit.cost), _num(limit.per_second), epoch or ""]
            elif isinstance(limit, SlidingWindow):
                args += ["sw", str(limit.cost), "", ""]
            else:
                args += [limit.kind, "", "", ""]
        await self._call(self._release, [self.key(i) for i in grant.items], args)

    async def extend(self, grant: Grant, *, now_ms: float | None = None) -> bool:
        held = [i for i in grant.items if isinstance(i.limit, (Lock, Concurrency))]
        if not held:
            return True
        args = ["" if now_ms is None else _num(now_ms), grant.holder, str(len(held))]
        for item in held:
            limit = item.limit
            ttl_s = limit.ttl_s if isinstance(limit, Lock) else limit.lease_s  # type: ignore[union-attr]
            args += [limit.kind, _num(ttl_s * 1000)]
        result = await self._call(self._extend, [self.key(i) for i in held], args)
        return int(result) == 1

    async def peek(self, item: Acquire, *, now_ms: float | None = None) -> Decision:
        admission = await self._run_admit([item], "peek", now_ms, dry_run=True)
        return admission.decisions[0]

    async def reset(self, item: Acquire) -> None:
        try:
            await self._redis.delete(self.key(item))
        except _UNREACHABLE as exc:
            raise LimitsUnavailableError(f"Redis unavailable: {exc}") from exc

    async def holders(self, item: Acquire) -> list[dict[str, Any]]:
        """Who holds a lock or the slots of a concurrency limit (for operators)."""
        key = self.key(item)
        try:
            if isinstance(item.limit, Lock):
                value: Any = await self._redis.get(key)
                if value is None:
                    return []
                ends, holder = _text(value).split("|", 1)
                return [{"holder": holder, "until_ms": float(ends)}]
            if not isinstance(item.limit, Concurrency):
                return []  # rate limits have no holders
            members: Any = await self._redis.zrange(key, 0, -1, withscores=True)
        except (RedisError, RedisClusterException, OSError) as exc:
            raise LimitsUnavailableError(f"Redis unavailable: {exc}") from exc
        return [{"holder": _text(m), "until_ms": float(score)} for m, score in members]

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
