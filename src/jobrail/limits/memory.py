"""The in-process limits backend (embedded mode and unit tests).

Same decisions as the Redis backend, step for step: the arithmetic below mirrors the
Lua in ``redis.py``, and a property test feeds both the same sequences.
"""

import hashlib
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from jobrail.limits.model import (
    Acquire,
    Admission,
    Concurrency,
    Decision,
    Grant,
    Lock,
    SlidingWindow,
    TokenBucket,
)

PRUNE_EVERY = 1024


def _ms(value: float) -> timedelta | None:
    return timedelta(milliseconds=value) if value > 0 else timedelta(0)


@dataclass
class _Window:
    entries: list[tuple[float, str]] = field(default_factory=list)
    window_ms: float = 0.0


@dataclass
class _State:
    buckets: dict[str, tuple[float, str]] = field(default_factory=dict)  # key -> (TAT ms, epoch)
    windows: dict[str, _Window] = field(default_factory=dict)
    slots: dict[str, dict[str, float]] = field(default_factory=dict)  # key -> holder -> end
    locks: dict[str, tuple[str, float]] = field(default_factory=dict)  # key -> (token, end)
    fences: dict[str, int] = field(default_factory=dict)
    fenced: dict[str, tuple[int, str]] = field(default_factory=dict)


class MemoryLimits:
    def __init__(self, clock_ms: Callable[[], float] | None = None) -> None:
        self._clock_ms = clock_ms or (lambda: time.time() * 1000)
        self._state = _State()
        self._admits = 0

    def clear(self) -> None:
        """Forget everything, as a Redis restarted without persistence does. Fencing
        tokens still grow afterwards: they are at least the clock (see ``redis.py``)."""
        self._state = _State()

    def _now(self, now_ms: float | None) -> float:
        return self._clock_ms() if now_ms is None else now_ms

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
        return self._admit(
            items, holder, now, dry_run=False, reserve=reserve, owner=owner, take_over=take_over
        )

    def _admit(
        self,
        items: Sequence[Acquire],
        holder: str,
        now: float,
        *,
        dry_run: bool,
        reserve: bool = False,
        owner: str = "",
        take_over: bool = False,
    ) -> Admission:
        decisions: list[Decision] = []
        plans: list[Callable[[], int | None]] = []
        reservations: list[tuple[str, float, str]] = []
        for item in items:
            decision, plan = self._evaluate(item, holder, now, owner, take_over)
            if reserve and not decision.allowed and isinstance(item.limit, TokenBucket):
                tat, epoch = self._bucket(item.key, now, holder)
                reservations.append(
                    (item.key, tat + item.limit.cost * 1000.0 / item.limit.per_second, epoch)
                )
                decision = Decision(
                    decision.name,
                    False,
                    decision.remaining,
                    decision.retry_after,
                    reserved=True,
                    epoch=epoch,
                )
            decisions.append(decision)
            plans.append(plan)
        allowed = all(d.allowed for d in decisions)
        if not allowed and not dry_run:
            for key, new_tat, epoch in reservations:
                self._state.buckets[key] = (new_tat, epoch)
        if not allowed or dry_run:
            return Admission(allowed=allowed, decisions=decisions, grant=None)
        fence = None
        for plan in plans:
            result = plan()
            if result is not None:
                fence = result
        return Admission(
            allowed=True,
            decisions=decisions,
            grant=Grant(
                items=tuple(items),
                holder=holder,
                fence=fence,
                epochs=tuple(d.epoch for d in decisions),
            ),
        )

    def _bucket(self, key: str, now: float, holder: str) -> tuple[float, str]:
        """A bucket's TAT and epoch. Absent or refilled completely, it starts from full
        in a new state, named after the (unique) holder that found it so, as in the Lua."""
        current = self._state.buckets.get(key)
        if current is not None and current[0] > now:
            return current
        # SHA-1 names a state, it guards nothing: it is what Redis's Lua offers.
        return now, hashlib.sha1(holder.encode(), usedforsecurity=False).hexdigest()[:16]

    def _evaluate(
        self, item: Acquire, holder: str, now: float, owner: str = "", take_over: bool = False
    ) -> tuple[Decision, Callable[[], int | None]]:
        limit, key, state = item.limit, item.key, self._state

        def owned(who: str) -> bool:
            return bool(owner) and who.startswith(owner)

        if isinstance(limit, TokenBucket):
            tat, epoch = self._bucket(key, now, holder)
            if item.prepaid is not None and item.prepaid == epoch:
                # Reserved in this very state: already paid for.
                return Decision(limit.name, True, 0, None, epoch=epoch), _nothing
            interval = 1000.0 / limit.per_second
            tau = limit.capacity * interval
            new_tat = tat + limit.cost * interval
            allow_at = new_tat - tau
            if allow_at <= now:
                remaining = math.floor((now - allow_at) / interval + 1e-9)

                def take() -> None:
                    state.buckets[key] = (new_tat, epoch)

                return Decision(limit.name, True, remaining, None, epoch=epoch), take
            remaining = max(0, math.floor((now - (tat - tau)) / interval + 1e-9))
            decision = Decision(limit.name, False, remaining, _ms(allow_at - now), epoch=epoch)
            return decision, _nothing
        if isinstance(limit, SlidingWindow):
            window_ms = limit.window_s * 1000
            log = state.windows.setdefault(key, _Window())
            log.window_ms = window_ms
            log.entries = [e for e in log.entries if e[0] > now - window_ms]
            count = len(log.entries)
            if count + limit.cost <= limit.limit:

                def add() -> None:
                    for j in range(1, limit.cost + 1):
                        log.entries.append((now, f"{holder}:{j}"))
                    log.entries.sort()

                return Decision(limit.name, True, limit.limit - count - limit.cost, None), add
            oldest = sorted(log.entries)[count + limit.cost - limit.limit - 1][0]
            decision = Decision(
                limit.name, False, max(0, limit.limit - count), _ms(oldest + window_ms - now)
            )
            return decision, _nothing
        if isinstance(limit, Concurrency):
            holders = {h: end for h, end in state.slots.get(key, {}).items() if end > now}
            state.slots[key] = holders
            count = len(holders)
            # The owner's own slots, looked for only when they would make the difference.
            mine = [h for h in holders if owned(h)] if count >= limit.slots else []
            if count < limit.slots or (take_over and count - len(mine) < limit.slots):

                def hold() -> None:
                    for taken in mine:
                        del holders[taken]
                    holders[holder] = now + limit.lease_s * 1000

                remaining = limit.slots - (count - len(mine)) - 1
                return Decision(limit.name, True, remaining, None), hold
            first_end = min(holders.values())
            own = bool(mine) and count - len(mine) < limit.slots
            return Decision(limit.name, False, 0, _ms(first_end - now), own=own), _nothing
        assert isinstance(limit, Lock)
        current = state.locks.get(key)
        if current is not None and current[1] > now and not (take_over and owned(current[0])):
            own = owned(current[0])
            return Decision(limit.name, False, 0, _ms(current[1] - now), own=own), _nothing

        def lock() -> int:
            state.locks[key] = (holder, now + limit.ttl_s * 1000)
            # At least the clock in µs, so it grows even after the state is lost.
            fence = max(state.fences.get(key, 0) + 1, math.floor(now * 1000))
            state.fences[key] = fence
            return fence

        return Decision(limit.name, True, 0, None), lock

    async def release(
        self, grant: Grant, *, refund: bool = False, now_ms: float | None = None
    ) -> None:
        state = self._state
        epochs = list(grant.epochs) or [None] * len(grant.items)
        for item, epoch in zip(grant.items, epochs, strict=True):
            limit, key = item.limit, item.key
            if isinstance(limit, TokenBucket) and refund:
                current = state.buckets.get(key)
                # Only to the state it was charged in: not to a bucket lost since.
                if current is not None and current[1] == epoch:
                    state.buckets[key] = (
                        current[0] - limit.cost * 1000.0 / limit.per_second,
                        epoch,
                    )
            elif isinstance(limit, SlidingWindow) and refund:
                log = state.windows.get(key)
                if log is not None:
                    mine = {f"{grant.holder}:{j}" for j in range(1, limit.cost + 1)}
                    log.entries = [e for e in log.entries if e[1] not in mine]
            elif isinstance(limit, Concurrency):
                state.slots.get(key, {}).pop(grant.holder, None)
            elif isinstance(limit, Lock):
                lock = state.locks.get(key)
                if lock is not None and lock[0] == grant.holder:
                    del state.locks[key]

    async def extend(self, grant: Grant, *, now_ms: float | None = None) -> bool:
        now, state = self._now(now_ms), self._state
        held = True
        for item in grant.items:
            limit, key = item.limit, item.key
            if isinstance(limit, Lock):
                current = state.locks.get(key)
                if current is None or current[0] != grant.holder or current[1] <= now:
                    held = False
                else:
                    state.locks[key] = (grant.holder, now + limit.ttl_s * 1000)
            elif isinstance(limit, Concurrency):
                holders = state.slots.get(key, {})
                end = holders.get(grant.holder)
                if end is None or end <= now:
                    held = False
                else:
                    holders[grant.holder] = now + limit.lease_s * 1000
        return held

    async def peek(self, item: Acquire, *, now_ms: float | None = None) -> Decision:
        admission = self._admit([item], "peek", self._now(now_ms), dry_run=True)
        return admission.decisions[0]

    async def reset(self, item: Acquire) -> None:
        tables: dict[str, dict[str, Any]] = {
            "tb": self._state.buckets,
            "sw": self._state.windows,
            "cs": self._state.slots,
            "lk": self._state.locks,
        }
        tables[item.limit.kind].pop(item.key, None)

    async def holders(self, item: Acquire) -> list[dict[str, Any]]:
        now = self._clock_ms()
        if isinstance(item.limit, Lock):
            lock = self._state.locks.get(item.key)
            return [{"holder": lock[0], "until_ms": lock[1]}] if lock and lock[1] > now else []
        if isinstance(item.limit, Concurrency):
            held = self._state.slots.get(item.key, {})
            return [{"holder": h, "until_ms": end} for h, end in held.items() if end > now]
        return []

    def _prune(self, now: float) -> None:
        """Forget what Redis would have expired, so memory stays bounded."""
        state = self._state
        state.buckets = {k: bucket for k, bucket in state.buckets.items() if bucket[0] > now}
        state.locks = {k: lock for k, lock in state.locks.items() if lock[1] > now}
        state.slots = {
            k: live
            for k, holders in state.slots.items()
            if (live := {h: end for h, end in holders.items() if end > now})
        }
        for log in state.windows.values():
            log.entries = [e for e in log.entries if e[0] > now - log.window_ms]
        state.windows = {k: log for k, log in state.windows.items() if log.entries}

    async def fenced_write(
        self, resource: str, fence: int, value: str, *, now_ms: float | None = None
    ) -> bool:
        current = self._state.fenced.get(resource)
        if current is not None and current[0] > fence:
            return False
        self._state.fenced[resource] = (fence, value)
        return True

    def fenced_value(self, resource: str) -> tuple[int, str] | None:
        return self._state.fenced.get(resource)

    async def close(self) -> None:
        return None


def _nothing() -> None:
    return None
