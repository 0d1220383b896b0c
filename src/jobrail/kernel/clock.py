"""Time as a dependency, so rules about time can be tested without sleeping."""

import asyncio
import contextlib
from datetime import UTC, datetime
from typing import Protocol


class Clock(Protocol):
    def now(self) -> datetime:
        """The current time, timezone-aware, in UTC."""
        ...


class SystemClock:
    def now(self) -> datetime:
        return datetime.now(UTC)


async def sleep_unless(stop: asyncio.Event, seconds: float) -> None:
    """Sleep `seconds`, or until `stop` is set if that comes first: the pause between two
    passes of a background loop that ends when its process stops."""
    if stop.is_set():
        return
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), seconds)
