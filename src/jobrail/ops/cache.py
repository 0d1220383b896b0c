"""A value kept a few seconds in this process: the overview's reads, shared by every tab
that refreshes it."""

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class ShortCache(Generic[T]):
    """One value, kept `ttl_s` seconds after it was loaded.

    - Callers that ask while it is loading wait for that load: N tabs cost one load.
    - A load that fails keeps nothing; the next caller loads again.
    - `ttl_s` 0 keeps nothing: every call loads.
    """

    def __init__(self, ttl_s: float, monotonic: Callable[[], float] = time.monotonic) -> None:
        self._ttl_s = ttl_s
        self._monotonic = monotonic
        self._kept: tuple[T, float] | None = None
        self._lock = asyncio.Lock()

    def _fresh(self) -> T | None:
        if self._kept is not None and self._monotonic() < self._kept[1]:
            return self._kept[0]
        return None

    async def get(self, load: Callable[[], Awaitable[T]]) -> T:
        if (kept := self._fresh()) is not None:
            return kept
        if self._ttl_s <= 0:
            return await load()
        async with self._lock:
            if (kept := self._fresh()) is not None:
                return kept
            value = await load()
            self._kept = (value, self._monotonic() + self._ttl_s)
            return value
