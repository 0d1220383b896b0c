"""Releases that failed because the limits store was away, tried again in the background.

A job's lock and concurrency slots are given back when its attempt ends. If Redis (or,
on a Redis Cluster, the node that serves the job's keys) cannot be reached at that
moment, they would stay taken until their TTL or lease ran out, holding back the next
job of the same key for that long. So the release is tried again, with backoff, for a
bounded time: when the node comes back or its replica takes over, the lock is free at
once. Releasing is safe to repeat (a holder token frees only what it holds; a lock
taken by another holder meanwhile is not touched), so only the locks and slots are
released again, never the tokens refunded (a refund that did arrive before its reply
was lost would be paid twice).
"""

import asyncio
import logging
from collections.abc import Awaitable, Callable

from jobrail.jobs.retry import backoff
from jobrail.kernel.throttled_log import ThrottledLog
from jobrail.limits.model import Grant, LimitsBackend, LimitsUnavailableError

log = logging.getLogger("jobrail.limits")


class ReleaseRetries:
    """Tries a failed release again `tries` times, waiting ``first_wait_s * 2**n`` (at
    most `max_wait_s`) before try `n`; at most `max_pending` at a time (more are left
    to their TTL)."""

    def __init__(
        self,
        backend: LimitsBackend,
        *,
        tries: int = 8,
        first_wait_s: float = 0.25,
        max_wait_s: float = 5.0,
        max_pending: int = 10_000,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self._backend = backend
        self._tries = tries
        self._first_wait_s = first_wait_s
        self._max_wait_s = max_wait_s
        self._max_pending = max_pending
        self._sleep = sleep
        self._tasks: set[asyncio.Task[None]] = set()
        self._warn = ThrottledLog(log)
        self.released = 0
        """Releases that failed and then succeeded on a later try."""
        self.given_up = 0
        """Releases still failing after every try (left to their TTL)."""

    @property
    def pending(self) -> int:
        return len(self._tasks)

    def add(self, grant: Grant, error: LimitsUnavailableError) -> None:
        """Release `grant` later: its release just failed with `error`."""
        if len(self._tasks) >= self._max_pending:
            self.given_up += 1
            self._warn("could not release limits (%s); they expire on their own", error)
            return
        self._warn("could not release limits (%s); trying again in the background", error)
        task = asyncio.get_running_loop().create_task(self._retry(grant))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _retry(self, grant: Grant) -> None:
        error: LimitsUnavailableError | None = None
        for n in range(self._tries):
            await self._sleep(backoff(n, self._first_wait_s, self._max_wait_s))
            try:
                await self._backend.release(grant)
            except LimitsUnavailableError as exc:
                error = exc
                continue
            self.released += 1
            log.info("released limits held by %s after %d more tries", grant.holder, n + 1)
            return
        self.given_up += 1
        self._warn("could not release limits (%s); gave up, they expire on their own", error)

    async def close(self) -> None:
        """Stop trying (at shutdown: what is left expires on its own)."""
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
