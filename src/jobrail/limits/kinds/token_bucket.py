"""Token bucket (GCRA): one timestamp per key, an exact ``retry_after``, reservations.

A bucket's state is ``tat|epoch``: its theoretical arrival time (ms) and the id of its
current state (a digest of the holder that found it full), so that a reservation made
in one state is honoured only in that state (see ``jobrail.limits.redis``)."""

import hashlib
import math
from dataclasses import dataclass
from typing import ClassVar

from jobrail.limits.kind import Context, Decision, LimitKind, Verdict, num, wait_ms

Buckets = dict[str, tuple[float, str]]  # key -> (TAT ms, epoch)


@dataclass(frozen=True, slots=True)
class TokenBucket(LimitKind[Buckets]):
    """``capacity`` tokens at most, refilled at ``per_second``; each acquire costs ``cost``.

    Implemented as GCRA: one timestamp per key, an exact ``retry_after``."""

    name: str
    key: str
    capacity: float
    per_second: float
    cost: float = 1.0

    kind: ClassVar[str] = "tb"
    reserves: ClassVar[bool] = True
    # p: capacity, per_second, cost, prepaid epoch (or ''). A bucket that is absent
    # (never used, expired, lost with Redis's data) or whose TAT has passed is full: a
    # new state, with a new epoch, begins now. An item whose prepaid epoch names the
    # bucket's epoch was paid for by a reservation made in that state. With c.reserve,
    # a denial reserves the next token (its caller comes back when it is due).
    LUA: ClassVar[str] = """
KINDS['tb'] = {
  admit = function(c, k, p)
    local key = k[1]
    local tat, state, e = c.now, redis.call('GET', key), nil
    if state then
      local t
      t, e = string.match(state, '^([^|]*)|(.*)$')
      t = tonumber(t or state) -- a value from before epochs is a bare TAT: keep it
      if t and t > c.now then tat = t else e = nil end
    end
    local epoch = e or string.sub(redis.sha1hex(c.holder), 1, 16)
    local cap, per_s, cost = tonumber(p[1]), tonumber(p[2]), tonumber(p[3])
    if p[4] ~= '' and p[4] == epoch then
      return 1, 0, 0, 0, epoch, 0, nil, nil -- reserved in this very state: already paid
    end
    local interval = 1000 / per_s
    local tau = cap * interval
    local new_tat = tat + cost * interval
    local allow_at = new_tat - tau
    local function charge()
      redis.call('SET', key, num(new_tat) .. '|' .. epoch)
      gc(key, new_tat - c.now)
    end
    if allow_at <= c.now then
      return 1, math.floor((c.now - allow_at) / interval + 1e-9), 0, 0, epoch, 0, charge, nil
    end
    local remaining = math.max(0, math.floor((c.now - (tat - tau)) / interval + 1e-9))
    if c.reserve then return 0, remaining, allow_at - c.now, 1, epoch, 0, nil, charge end
    return 0, remaining, allow_at - c.now, 0, epoch, 0, nil, nil
  end,
  -- p: cost, per_second, epoch. A refund goes back only to the state it was charged in.
  release = function(c, k, p)
    if not c.refund then return end
    local key = k[1]
    local state = redis.call('GET', key)
    local tat, epoch = nil, nil
    if state then tat, epoch = string.match(state, '^([^|]*)|(.*)$') end
    if tat and epoch == p[3] then
      local ttl = redis.call('PTTL', key)
      local refunded = tonumber(tat) - tonumber(p[1]) * 1000 / tonumber(p[2])
      redis.call('SET', key, num(refunded) .. '|' .. epoch)
      if ttl > 0 then redis.call('PEXPIRE', key, ttl) end
    end
  end,
}
"""

    def __post_init__(self) -> None:
        if self.capacity <= 0 or self.per_second <= 0:
            raise ValueError(f"limit {self.name}: capacity and per_second must be positive")
        if not 0 < self.cost <= self.capacity:
            raise ValueError(f"limit {self.name}: cost must be in (0, capacity]")

    def admit_args(self, prepaid: str | None) -> list[str]:
        return [num(self.capacity), num(self.per_second), num(self.cost), prepaid or ""]

    def release_args(self, epoch: str | None) -> list[str]:
        return [num(self.cost), num(self.per_second), epoch or ""]

    @classmethod
    def new_state(cls) -> Buckets:
        return {}

    def evaluate(self, state: Buckets, key: str, prepaid: str | None, c: Context) -> Verdict:
        tat, epoch = _bucket(state, key, c.now, c.holder)
        if prepaid is not None and prepaid == epoch:
            # Reserved in this very state: already paid for.
            return Verdict(Decision(self.name, True, 0, None, epoch=epoch))
        interval = 1000.0 / self.per_second
        tau = self.capacity * interval
        new_tat = tat + self.cost * interval
        allow_at = new_tat - tau

        def charge() -> None:
            state[key] = (new_tat, epoch)

        if allow_at <= c.now:
            remaining = math.floor((c.now - allow_at) / interval + 1e-9)
            return Verdict(Decision(self.name, True, remaining, None, epoch=epoch), take=charge)
        remaining = max(0, math.floor((c.now - (tat - tau)) / interval + 1e-9))
        wait = wait_ms(allow_at - c.now)
        if c.reserve:
            decision = Decision(self.name, False, remaining, wait, reserved=True, epoch=epoch)
            return Verdict(decision, reserve=charge)
        return Verdict(Decision(self.name, False, remaining, wait, epoch=epoch))

    def release(
        self, state: Buckets, key: str, holder: str, epoch: str | None, refund: bool
    ) -> None:
        current = state.get(key)
        # Only to the state it was charged in: not to a bucket lost since.
        if refund and current is not None and current[1] == epoch:
            state[key] = (current[0] - self.cost * 1000.0 / self.per_second, current[1])

    def reset(self, state: Buckets, key: str) -> None:
        state.pop(key, None)

    @classmethod
    def prune(cls, state: Buckets, now: float) -> Buckets:
        return {key: bucket for key, bucket in state.items() if bucket[0] > now}


def _bucket(state: Buckets, key: str, now: float, holder: str) -> tuple[float, str]:
    """A bucket's TAT and epoch. Absent or refilled completely, it starts from full in a
    new state, named after the (unique) holder that found it so, as in the Lua."""
    current = state.get(key)
    if current is not None and current[0] > now:
        return current
    # SHA-1 names a state, it guards nothing: it is what Redis's Lua offers.
    return now, hashlib.sha1(holder.encode(), usedforsecurity=False).hexdigest()[:16]
