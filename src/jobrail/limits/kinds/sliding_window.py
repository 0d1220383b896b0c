"""Sliding window: an exact log of the acquires of the last ``window_s`` seconds."""

from dataclasses import dataclass, field
from typing import ClassVar

from jobrail.limits.kind import Context, Decision, LimitKind, Verdict, num, wait_ms


@dataclass
class Log:
    entries: list[tuple[float, str]] = field(default_factory=list)  # (time ms, member)
    window_ms: float = 0.0


Logs = dict[str, Log]


@dataclass(frozen=True, slots=True)
class SlidingWindow(LimitKind[Logs]):
    """At most ``limit`` acquires in any window of ``window_s`` seconds (an exact log)."""

    name: str
    key: str
    limit: int
    window_s: float
    cost: int = 1

    kind: ClassVar[str] = "sw"
    # p: limit, window (ms), cost. Members are '<holder>:<n>', one per unit of cost.
    LUA: ClassVar[str] = """
KINDS['sw'] = {
  admit = function(c, k, p)
    local key = k[1]
    local limit, window, cost = tonumber(p[1]), tonumber(p[2]), tonumber(p[3])
    redis.call('ZREMRANGEBYSCORE', key, '-inf', num(c.now - window))
    local count = redis.call('ZCARD', key)
    if count + cost <= limit then
      local function add()
        for j = 1, cost do redis.call('ZADD', key, num(c.now), c.holder .. ':' .. j) end
        gc(key, window)
      end
      return 1, limit - count - cost, 0, 0, '', 0, add, nil
    end
    local idx = count + cost - limit - 1
    local oldest = redis.call('ZRANGE', key, idx, idx, 'WITHSCORES')
    return 0, math.max(0, limit - count), tonumber(oldest[2]) + window - c.now, 0, '', 0, nil, nil
  end,
  -- p: cost.
  release = function(c, k, p)
    if not c.refund then return end
    for j = 1, tonumber(p[1]) do redis.call('ZREM', k[1], c.holder .. ':' .. j) end
  end,
}
"""

    def __post_init__(self) -> None:
        if self.limit < 1 or self.window_s <= 0:
            raise ValueError(f"limit {self.name}: limit >= 1 and window_s > 0 are needed")
        if not 1 <= self.cost <= self.limit:
            raise ValueError(f"limit {self.name}: cost must be in [1, limit]")

    def admit_args(self, prepaid: str | None) -> list[str]:
        return [str(self.limit), num(self.window_s * 1000), str(self.cost), ""]

    def release_args(self, epoch: str | None) -> list[str]:
        return [str(self.cost), "", ""]

    @classmethod
    def new_state(cls) -> Logs:
        return {}

    def evaluate(self, state: Logs, key: str, prepaid: str | None, c: Context) -> Verdict:
        window_ms = self.window_s * 1000
        log = state.setdefault(key, Log())
        log.window_ms = window_ms
        log.entries = [e for e in log.entries if e[0] > c.now - window_ms]
        count = len(log.entries)
        if count + self.cost <= self.limit:

            def add() -> None:
                for j in range(1, self.cost + 1):
                    log.entries.append((c.now, f"{c.holder}:{j}"))
                log.entries.sort()

            return Verdict(Decision(self.name, True, self.limit - count - self.cost, None), add)
        oldest = sorted(log.entries)[count + self.cost - self.limit - 1][0]
        wait = wait_ms(oldest + window_ms - c.now)
        return Verdict(Decision(self.name, False, max(0, self.limit - count), wait))

    def release(self, state: Logs, key: str, holder: str, epoch: str | None, refund: bool) -> None:
        log = state.get(key)
        if refund and log is not None:
            mine = {f"{holder}:{j}" for j in range(1, self.cost + 1)}
            log.entries = [e for e in log.entries if e[1] not in mine]

    def reset(self, state: Logs, key: str) -> None:
        state.pop(key, None)

    @classmethod
    def prune(cls, state: Logs, now: float) -> Logs:
        for log in state.values():
            log.entries = [e for e in log.entries if e[0] > now - log.window_ms]
        return {key: log for key, log in state.items() if log.entries}
