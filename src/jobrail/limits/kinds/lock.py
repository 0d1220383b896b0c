"""Lock: one holder at a time, a TTL renewed while its job runs, and a fencing token.

The fence is ``max(last fence + 1, now in µs)``, so that it grows even after the store
lost its data (see ``jobrail.limits.redis``)."""

import math
from dataclasses import dataclass, field
from typing import Any, ClassVar

from jobrail.limits.keys import hash_tagged
from jobrail.limits.kind import Context, Decision, LimitKind, Verdict, num, wait_ms

FENCE_TTL_MS = 30 * 24 * 3600 * 1000


@dataclass
class Locks:
    held: dict[str, tuple[str, float]] = field(default_factory=dict)  # key -> (token, end)
    fences: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Lock(LimitKind[Locks]):
    """One holder at a time, with a random token, a TTL renewed while the job runs, and a
    fencing token that only grows (pass it to writes so a stale holder's write is refused),
    also across a restart of the store that lost its data (see ``jobrail.limits.redis``)."""

    key: str
    ttl_s: float = 30.0
    name: str = "lock"

    kind: ClassVar[str] = "lk"
    # k: the lock ('<end ms>|<holder>'), its fencing counter. p: ttl (ms).
    LUA: ClassVar[str] = (
        """
KINDS['lk'] = {
  admit = function(c, k, p)
    local key, fence_key, ttl = k[1], k[2], tonumber(p[1])
    local current = redis.call('GET', key)
    local ends = current and tonumber(string.match(current, '^([^|]+)|')) or nil
    local mine = ends and ends > c.now and c.owned(string.match(current, '|(.*)$'))
    if ends and ends > c.now and not (c.take_over and mine) then
      local who = string.match(current, '|(.*)$')
      return 0, 0, ends - c.now, 0, '', mine and 1 or 0, nil, nil, nil, who
    end
    local function lock()
      redis.call('SET', key, num(c.now + ttl) .. '|' .. c.holder)
      gc(key, ttl)
      -- The counter alone would start again from 1 after Redis lost its data; the
      -- clock (us) alone could repeat within a microsecond. Their maximum only grows
      -- while the clock does not go back by more than the time since the last fence
      -- (see jobrail.limits.redis).
      local f = math.max(tonumber(redis.call('GET', fence_key) or 0) + 1, c.now_us)
      local fence = string.format('%.0f', f)
      redis.call('SET', fence_key, fence, 'PX', """
        + str(FENCE_TTL_MS)
        + """)
      return fence
    end
    return 1, 0, 0, 0, '', 0, lock, nil
  end,
  release = function(c, k, p)
    local current = redis.call('GET', k[1])
    if current and string.match(current, '|(.*)$') == c.holder then redis.call('DEL', k[1]) end
  end,
  extend = function(c, k, ttl)
    local key = k[1]
    local current = redis.call('GET', key)
    local ends = current and tonumber(string.match(current, '^([^|]+)|')) or nil
    if not (current and string.match(current, '|(.*)$') == c.holder and ends > c.now) then
      return false
    end
    redis.call('SET', key, num(c.now + ttl) .. '|' .. c.holder)
    gc(key, ttl)
    return true
  end,
  holders = function(c, k)
    local current = redis.call('GET', k[1])
    if not current then return {} end
    local ends, holder = string.match(current, '^([^|]*)|(.*)$')
    return {holder, ends}
  end,
}
"""
    )

    def __post_init__(self) -> None:
        if self.ttl_s <= 0:
            raise ValueError("lock ttl_s must be positive")

    @property
    def hold_ttl_s(self) -> float | None:
        return self.ttl_s

    def redis_keys(self, prefix: str, key: str) -> list[str]:
        tagged = hash_tagged(key)
        return [f"{prefix}{self.kind}:{tagged}", f"{prefix}fence:{tagged}"]

    def admit_args(self, prepaid: str | None) -> list[str]:
        return [num(self.ttl_s * 1000), "", "", ""]

    @classmethod
    def new_state(cls) -> Locks:
        return Locks()

    def evaluate(self, state: Locks, key: str, prepaid: str | None, c: Context) -> Verdict:
        current = state.held.get(key)
        if current is not None and current[1] > c.now and not (c.take_over and c.owned(current[0])):
            wait = wait_ms(current[1] - c.now)
            denied = Decision(self.name, False, 0, wait, own=c.owned(current[0]), holder=current[0])
            return Verdict(denied)

        def lock() -> int:
            state.held[key] = (c.holder, c.now + self.ttl_s * 1000)
            # At least the clock in µs, so it grows even after the state is lost.
            fence = max(state.fences.get(key, 0) + 1, math.floor(c.now * 1000))
            state.fences[key] = fence
            return fence

        return Verdict(Decision(self.name, True, 0, None), take=lock)

    def release(self, state: Locks, key: str, holder: str, epoch: str | None, refund: bool) -> None:
        current = state.held.get(key)
        if current is not None and current[0] == holder:
            del state.held[key]

    def extend(self, state: Locks, key: str, holder: str, now: float) -> bool:
        current = state.held.get(key)
        if current is None or current[0] != holder or current[1] <= now:
            return False
        state.held[key] = (holder, now + self.ttl_s * 1000)
        return True

    def holders(self, state: Locks, key: str, now: float) -> list[dict[str, Any]]:
        current = state.held.get(key)
        return (
            [{"holder": current[0], "until_ms": current[1]}] if current and current[1] > now else []
        )

    def reset(self, state: Locks, key: str) -> None:
        state.held.pop(key, None)  # the fence stays: it only ever grows

    @classmethod
    def prune(cls, state: Locks, now: float) -> Locks:
        state.held = {key: lock for key, lock in state.held.items() if lock[1] > now}
        return state
