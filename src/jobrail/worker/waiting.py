"""Waiting for a database or a broker that is away, holding the delivery.

The runner never lets a delivery be acknowledged before its outcome is recorded or its
message is back on the bus: while the service it needs is away, it tries again with the
platform's backoff (``jobrail.jobs.retry.backoff``), logging the first failure and
every twentieth.
"""

import asyncio
import logging
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import TypeVar

from jobrail.jobs.retry import backoff

log = logging.getLogger("jobrail.runner")

T = TypeVar("T")

FIRST_WAIT_S = 0.05


async def hold(
    operation: Callable[[], Awaitable[T]],
    unavailable: type[Exception],
    what: str,
    max_delay: timedelta,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> T:
    """Run `operation` until the service it needs answers, backing off up to `max_delay`."""
    failures = 0
    while True:
        try:
            result = await operation()
        except unavailable as exc:
            if failures == 0 or (failures + 1) % 20 == 0:
                log.warning("%s unavailable (%s); holding the delivery and retrying", what, exc)
            await sleep(backoff(failures, FIRST_WAIT_S, max_delay.total_seconds()))
            failures += 1
        else:
            if failures:
                log.info("%s is back after %d failed tries", what, failures)
            return result
