"""Concurrency slots: at most ``slots`` holders at once, each with a lease it renews."""

from dataclasses import dataclass
from typing import Any, ClassVar

from jobrail.limits.kind import Context, Decision, LimitKind, Verdict, num, wait_ms

Slots = dict[str, dict[str, float]]  # key -> holder -> end of its lease (ms)


@dataclass(frozen=True, slots=True)
class Concurrency(LimitKind[Slots]):
    """At most ``slots`` holders at once. A slot held by a dead worker frees itself when
    its lease ends; a live holder's lease is renewed while its job runs."""

    name: str
    key: str
    slots: int
    lease_s: float = 60.0

    kind: ClassVar[str] = "cs"
    # p: slots, lease (ms). A sorted set of holders scored by the end of their lease.
    # The owner's own slots are looked for only when they would make the difference.
    LUA: ClassVar[str] = """
KINDS['cs'] = {
  admit = function(c, k, p)
    local key = k[1]
    local slots, lease = tonumber(p[1]), tonumber(p[2])
    redis.call('ZREMRANGEBYSCORE', key, '-inf', num(c.now))
    local count = redis.call('ZCARD', key)
    local mine = {}
    if count >= slots and c.owner ~= '' then
      for _, member in ipairs(redis.call('ZRANGE', key, 0, -1)) do
        if c.owned(member) then mine[#mine + 1] = member end
      end
    end
    if count < slots or (c.take_over and count - #mine < slots) then
      local function hold()
        for _, member in ipairs(mine) do redis.call('ZREM', key, member) end
        redis.call('ZADD', key, num(c.now + lease), c.holder)
        if redis.call('PTTL', key) < lease + 1000 then gc(key, lease) end
      end
      return 1, slots - (count - #mine) - 1, 0, 0, '', 0, hold, nil
    end
    local first = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
    local own = (#mine > 0 and count - #mine < slots) and 1 or 0
    return 0, 0, tonumber(first[2]) - c.now, 0, '', own, nil, nil
  end,
  release = function(c, k, p) redis.call('ZREM', k[1], c.holder) end,
  extend = function(c, k, ttl)
    local key = k[1]
    local score = redis.call('ZSCORE', key, c.holder)
    local ends = score and tonumber(score) or nil
    if not (ends and ends > c.now) then return false end
    redis.call('ZADD', key, 'XX', num(c.now + ttl), c.holder)
    if redis.call('PTTL', key) < ttl + 1000 then gc(key, ttl) end
    return true
  end,
  holders = function(c, k) return redis.call('ZRANGE', k[1], 0, -1, 'WITHSCORES') end,
}
"""

    def __post_init__(self) -> None:
        if self.slots < 1 or self.lease_s <= 0:
            raise ValueError(f"limit {self.name}: slots >= 1 and lease_s > 0 are needed")

    @property
    def hold_ttl_s(self) -> float | None:
        return self.lease_s

    def admit_args(self, prepaid: str | None) -> list[str]:
        return [str(self.slots), num(self.lease_s * 1000), "", ""]

    @classmethod
    def new_state(cls) -> Slots:
        return {}

    def evaluate(self, state: Slots, key: str, prepaid: str | None, c: Context) -> Verdict:
        holders = {h: end for h, end in state.get(key, {}).items() if end > c.now}
        state[key] = holders
        count = len(holders)
        mine = [h for h in holders if c.owned(h)] if count >= self.slots else []
        if count < self.slots or (c.take_over and count - len(mine) < self.slots):

            def hold() -> None:
                for taken in mine:
                    del holders[taken]
                holders[c.holder] = c.now + self.lease_s * 1000

            remaining = self.slots - (count - len(mine)) - 1
            return Verdict(Decision(self.name, True, remaining, None), take=hold)
        wait = wait_ms(min(holders.values()) - c.now)
        own = bool(mine) and count - len(mine) < self.slots
        return Verdict(Decision(self.name, False, 0, wait, own=own))

    def release(self, state: Slots, key: str, holder: str, epoch: str | None, refund: bool) -> None:
        state.get(key, {}).pop(holder, None)

    def extend(self, state: Slots, key: str, holder: str, now: float) -> bool:
        holders = state.get(key, {})
        end = holders.get(holder)
        if end is None or end <= now:
            return False
        holders[holder] = now + self.lease_s * 1000
        return True

    def holders(self, state: Slots, key: str, now: float) -> list[dict[str, Any]]:
        held = state.get(key, {})
        return [{"holder": h, "until_ms": end} for h, end in held.items() if end > now]

    def reset(self, state: Slots, key: str) -> None:
        state.pop(key, None)

    @classmethod
    def prune(cls, state: Slots, now: float) -> Slots:
        return {
            key: live
            for key, holders in state.items()
            if (live := {h: end for h, end in holders.items() if end > now})
        }
