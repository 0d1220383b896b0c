"""Token bucket (GCRA): one timestamp per key, an exact ``retry_after``, reservations.

A bucket's state is ``tat|epoch|holder``: its theoretical arrival time (ms), the id of
its current state (a digest of the holder that found it full), so that a reservation
made in one state is honoured only in that state (see ``jobrail.limits.redis``), and
the holder that charged it last.

What the bucket keeps to is the moments its tokens' work starts, not the moments it
answers: a job starts after its claim, some milliseconds or, when the database stalls,
seconds after the bucket let it in. So each token comes with the latest moment its work
may start (`Decision.until`): the bucket's TAT just before the token was charged, plus
`START_TOLERANCE_MS`. Starts each no earlier than their token's allow time and no later
than the TAT before it are ones GCRA itself would have let through in the order they
were charged (the TAT they would leave is never later than the one stored), so they keep
to ``capacity + per_second * T`` in any window of T seconds; the tolerance adds
``per_second * START_TOLERANCE_MS`` to that at most. The later tokens of a burst and
every reserved token have room of their own (a reserved one ``(capacity - cost) /
per_second``); the first token a full bucket gives, and every token of a bucket whose
capacity is its cost, has only the tolerance: the time a job takes from its admission to
its handler (its claim, a delivery back from a delay queue). A job that starts later
competes for a token again (``jobrail.worker.admission``).

A reservation carries its moment (`Acquire.prepaid` is ``<epoch>@<until>``): brought
back after it, it is not honoured and the job competes again; brought back before its
token's allow time (another clock's idea of "due"), the job is told to wait, keeping it.

A refund goes back only while the refunded token is the bucket's last charge (its
holder is the one recorded): a token refunded after later ones were charged would give
the bucket's next token the time of one already given out, and the two would start
together."""

import hashlib
import math
from dataclasses import dataclass
from typing import ClassVar

from jobrail.limits.kind import Context, Decision, LimitKind, Verdict, num, reserved, wait_ms

Buckets = dict[str, tuple[float, str, str]]  # key -> (TAT ms, epoch, last charging holder)

START_TOLERANCE_MS = 50.0
"""How much later than the bucket's TAT before its token a job may start (see above):
the starts of a bucket's jobs keep to ``capacity + per_second * (T + 0.05 s)``, which for
whole numbers ``capacity + per_second * T`` is that number below 20 tokens a second."""


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
    # p: capacity, per_second, cost, prepaid reservation ('<epoch>@<until>', or ''). A
    # bucket that is absent (never used, expired, lost with Redis's data) or whose TAT
    # has passed is full: a new state, with a new epoch, begins now. An item whose
    # reservation names the bucket's epoch was paid for by a reservation made in that
    # state: honoured from its token's allow time until its `until`, after which it
    # competes again. With c.reserve, a denial reserves the next token (its caller comes
    # back when it is due). The last value is `until` (see the module docstring).
    LUA: ClassVar[str] = (
        """
local TB_LATE = """
        + num(START_TOLERANCE_MS)
        + """
KINDS['tb'] = {
  admit = function(c, k, p)
    local key = k[1]
    local tat, state, e = c.now, redis.call('GET', key), nil
    if state then
      local t
      t, e = string.match(state, '^([^|]*)|([^|]*)')
      t = tonumber(t or state) -- a value from before epochs is a bare TAT: keep it
      if t and t > c.now then tat = t else e = nil end
    end
    local epoch = e or string.sub(redis.sha1hex(c.holder), 1, 16)
    local cap, per_s, cost = tonumber(p[1]), tonumber(p[2]), tonumber(p[3])
    local interval = 1000 / per_s
    local tau = cap * interval
    local paid, use_by = string.match(p[4], '^([^@]*)@?(.*)$')
    use_by = tonumber(use_by)
    if paid ~= '' and paid == epoch then
      if not use_by then
        return 1, 0, 0, 0, epoch, 0, nil, nil, c.now + TB_LATE -- one without its time
      end
      local due = use_by - TB_LATE - tau + cost * interval
      if c.now < due then
        return 0, 0, due - c.now, 1, epoch, 0, nil, nil, use_by -- early: still reserved
      end
      if c.now <= use_by then
        return 1, 0, 0, 0, epoch, 0, nil, nil, use_by -- reserved in this state: paid
      end
    end
    local new_tat = tat + cost * interval
    local allow_at = new_tat - tau
    local function charge()
      redis.call('SET', key, num(new_tat) .. '|' .. epoch .. '|' .. c.holder)
      gc(key, new_tat - c.now)
    end
    if allow_at <= c.now then
      local left = math.floor((c.now - allow_at) / interval + 1e-9)
      return 1, left, 0, 0, epoch, 0, charge, nil, tat + TB_LATE
    end
    local remaining = math.max(0, math.floor((c.now - (tat - tau)) / interval + 1e-9))
    if c.reserve then
      return 0, remaining, allow_at - c.now, 1, epoch, 0, nil, charge, tat + TB_LATE
    end
    return 0, remaining, allow_at - c.now, 0, epoch, 0, nil, nil, nil
  end,
  -- p: cost, per_second, epoch. A refund goes back only to the state it was charged in,
  -- and only while its charge is the bucket's last (see the module docstring).
  release = function(c, k, p)
    if not c.refund then return end
    local key = k[1]
    local state = redis.call('GET', key)
    local tat, epoch, holder = nil, nil, nil
    if state then tat, epoch, holder = string.match(state, '^([^|]*)|([^|]*)|?(.*)$') end
    if tat and epoch == p[3] and holder == c.holder then
      local ttl = redis.call('PTTL', key)
      local refunded = tonumber(tat) - tonumber(p[1]) * 1000 / tonumber(p[2])
      redis.call('SET', key, num(refunded) .. '|' .. epoch .. '|')
      if ttl > 0 then redis.call('PEXPIRE', key, ttl) end
    end
  end,
}
"""
    )

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
        interval = 1000.0 / self.per_second
        tau = self.capacity * interval
        paid, use_by = reserved(prepaid)
        if prepaid is not None and paid == epoch:
            if use_by is None:  # a reservation without its time
                until = c.now + START_TOLERANCE_MS
                return Verdict(Decision(self.name, True, 0, None, epoch=epoch, until=until))
            due = use_by - START_TOLERANCE_MS - tau + self.cost * interval
            if c.now < due:  # early: still reserved
                wait = wait_ms(due - c.now)
                decision = Decision(
                    self.name, False, 0, wait, reserved=True, epoch=epoch, until=use_by
                )
                return Verdict(decision)
            if c.now <= use_by:  # reserved in this very state: already paid for
                return Verdict(Decision(self.name, True, 0, None, epoch=epoch, until=use_by))
        new_tat = tat + self.cost * interval
        allow_at = new_tat - tau

        def charge() -> None:
            state[key] = (new_tat, epoch, c.holder)

        if allow_at <= c.now:
            remaining = math.floor((c.now - allow_at) / interval + 1e-9)
            until = tat + START_TOLERANCE_MS
            decision = Decision(self.name, True, remaining, None, epoch=epoch, until=until)
            return Verdict(decision, take=charge)
        remaining = max(0, math.floor((c.now - (tat - tau)) / interval + 1e-9))
        wait = wait_ms(allow_at - c.now)
        if c.reserve:
            until = tat + START_TOLERANCE_MS
            decision = Decision(
                self.name, False, remaining, wait, reserved=True, epoch=epoch, until=until
            )
            return Verdict(decision, reserve=charge)
        return Verdict(Decision(self.name, False, remaining, wait, epoch=epoch))

    def release(
        self, state: Buckets, key: str, holder: str, epoch: str | None, refund: bool
    ) -> None:
        current = state.get(key)
        # Only to the state it was charged in (not to a bucket lost since), and only while
        # its charge is the last one.
        if refund and current is not None and current[1] == epoch and current[2] == holder:
            state[key] = (current[0] - self.cost * 1000.0 / self.per_second, current[1], "")

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
        return current[0], current[1]
    # SHA-1 names a state, it guards nothing: it is what Redis's Lua offers.
    return now, hashlib.sha1(holder.encode(), usedforsecurity=False).hexdigest()[:16]
