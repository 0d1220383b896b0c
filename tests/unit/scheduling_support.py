"""What the scheduler's unit tests share: one virtual time for the clock, the memory
limits backend and the monotonic clock, and a memory backend that can be "down"."""

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from jobrail.limits.memory import MemoryLimits
from jobrail.limits.model import Acquire, Admission, Grant, LimitsUnavailableError

T0 = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)


class Timeline:
    """Virtual time: `now` for Clock, `ms` for MemoryLimits, `monotonic` for Leadership."""

    def __init__(self, start: datetime = T0) -> None:
        self._start = start
        self.elapsed = 0.0

    def now(self) -> datetime:
        return self._start + timedelta(seconds=self.elapsed)

    def ms(self) -> float:
        return self.now().timestamp() * 1000

    def monotonic(self) -> float:
        return 1000.0 + self.elapsed

    def advance(self, seconds: float) -> None:
        self.elapsed += seconds


class FlakyLimits(MemoryLimits):
    """The memory backend, but it can be unreachable like Redis (`down = True`)."""

    def __init__(self, timeline: Timeline) -> None:
        super().__init__(clock_ms=timeline.ms)
        self.down = False

    def _check(self) -> None:
        if self.down:
            raise LimitsUnavailableError("Redis unavailable: connection refused")

    async def admit(
        self, items: Sequence[Acquire], holder: str, *, reserve: bool = False, **kw: Any
    ) -> Admission:
        self._check()
        return await super().admit(items, holder, reserve=reserve, **kw)

    async def extend(self, grant: Grant, **kw: Any) -> bool:
        self._check()
        return await super().extend(grant, **kw)

    async def release(self, grant: Grant, *, refund: bool = False, **kw: Any) -> None:
        self._check()
        await super().release(grant, refund=refund, **kw)
