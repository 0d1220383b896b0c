"""The in-process limits backend (embedded mode and unit tests).

Same decisions as the Redis backend, step for step: each kind's evaluation in memory
(``LimitKind.evaluate``) mirrors its Lua, and a property test feeds both backends the
same sequences. Each kind keeps its own state here, as in Redis each has its own keys.
"""

import time
from collections.abc import Callable, Sequence
from typing import Any

from jobrail.limits.kind import Context, LimitKind
from jobrail.limits.model import Acquire, Admission, Decision, Grant

PRUNE_EVERY = 1024


class MemoryLimits:
    def __init__(self, clock_ms: Callable[[], float] | None = None) -> None:
        self._clock_ms = clock_ms or (lambda: time.time() * 1000)
        self._states: dict[type[LimitKind[Any]], Any] = {}
        self._fenced: dict[str, tuple[int, str]] = {}
        self._admits = 0

    def clear(self) -> None:
        """Forget everything, as a Redis restarted without persistence does. Fencing
        tokens still grow afterwards: they are at least the clock (see ``redis.py``)."""
        self._states = {}
        self._fenced = {}

    def _now(self, now_ms: float | None) -> float:
        return self._clock_ms() if now_ms is None else now_ms

    def _state(self, limit: LimitKind[Any]) -> Any:
        kind = type(limit)
        state = self._states.get(kind)
        if state is None:
            state = self._states[kind] = kind.new_state()
        return state

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
        now = self._now(now_ms)
        self._admits += 1
        if self._admits % PRUNE_EVERY == 0:
            self._prune(now)
        context = Context(holder, now, owner=owner, take_over=take_over, reserve=reserve)
        return self._admit(items, context, dry_run=False)

    def _admit(self, items: Sequence[Acquire], c: Context, *, dry_run: bool) -> Admission:
        verdicts = [
            item.limit.evaluate(self._state(item.limit), item.key, item.prepaid, c)
            for item in items
        ]
        decisions = [verdict.decision for verdict in verdicts]
        allowed = all(d.allowed for d in decisions)
        if dry_run:
            return Admission(allowed=allowed, decisions=decisions, grant=None, now_ms=c.now)
        if not allowed:
            for verdict in verdicts:
                verdict.reserve()
            return Admission(allowed=False, decisions=decisions, grant=None, now_ms=c.now)
        fence = None
        for verdict in verdicts:
            result = verdict.take()
            if result is not None:
                fence = result
        grant = Grant(
            items=tuple(items),
            holder=c.holder,
            fence=fence,
            epochs=tuple(d.epoch for d in decisions),
        )
        return Admission(allowed=True, decisions=decisions, grant=grant, now_ms=c.now)

    async def release(
        self, grant: Grant, *, refund: bool = False, now_ms: float | None = None
    ) -> None:
        epochs = list(grant.epochs) or [None] * len(grant.items)
        for item, epoch in zip(grant.items, epochs, strict=True):
            item.limit.release(self._state(item.limit), item.key, grant.holder, epoch, refund)

    async def extend(self, grant: Grant, *, now_ms: float | None = None) -> bool:
        now = self._now(now_ms)
        held = True
        for item in grant.items:
            if item.limit.hold_ttl_s is None:
                continue
            if not item.limit.extend(self._state(item.limit), item.key, grant.holder, now):
                held = False  # the others are still renewed, as in the Lua
        return held

    async def peek(self, item: Acquire, *, now_ms: float | None = None) -> Decision:
        return (await self.peek_all([item], now_ms=now_ms))[0]

    async def peek_all(
        self, items: Sequence[Acquire], *, now_ms: float | None = None
    ) -> list[Decision]:
        admission = self._admit(items, Context("peek", self._now(now_ms)), dry_run=True)
        return list(admission.decisions)

    async def reset(self, item: Acquire) -> None:
        item.limit.reset(self._state(item.limit), item.key)

    async def holders(self, item: Acquire) -> list[dict[str, Any]]:
        return item.limit.holders(self._state(item.limit), item.key, self._clock_ms())

    def _prune(self, now: float) -> None:
        """Forget what Redis would have expired, so memory stays bounded."""
        self._states = {kind: kind.prune(state, now) for kind, state in self._states.items()}

    async def fenced_write(
        self, resource: str, fence: int, value: str, *, now_ms: float | None = None
    ) -> bool:
        current = self._fenced.get(resource)
        if current is not None and current[0] > fence:
            return False
        self._fenced[resource] = (fence, value)
        return True

    def fenced_value(self, resource: str) -> tuple[int, str] | None:
        return self._fenced.get(resource)

    async def close(self) -> None:
        return None
