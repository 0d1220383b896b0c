"""The watchdog of a running attempt: it keeps the attempt's claim, or stops it.

A claim is a lease on the job (see ``jobrail.jobs.runner``): `LeaseWatchdog` renews it
every third of the lease while the attempt runs, and stops the attempt when a renewal
finds the claim gone, or when no renewal has been confirmed by RENEWAL_MARGIN of a
lease before the last confirmed lease ends: from that moment another worker may take
the job over, and the two must not run it at once.
"""

import asyncio
import logging
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from typing import TypeVar

from jobrail.jobs.domain import Job
from jobrail.jobs.ports import ClaimToken, JobStore
from jobrail.kernel.clock import Clock
from jobrail.kernel.errors import TransientError

log = logging.getLogger("jobrail.runner")

T = TypeVar("T")

# A running attempt whose renewals are not confirmed stops this fraction of its lease
# before the lease would end: another worker may claim the job from that moment on.
RENEWAL_MARGIN = 1 / 6


class LeaseLostError(TransientError):
    """The attempt's claim could not be renewed (another worker took the job over, or
    the database was away for a whole lease); the attempt was stopped.

    `unconfirmed`: no one took the job over, the database just did not confirm a
    renewal in time, and the attempt stopped on time (before its lease ended). That
    attempt is given back rather than spent (see `JobRunner._attempt`)."""

    def __init__(self, message: str, *, unconfirmed: bool = False) -> None:
        super().__init__(message)
        self.unconfirmed = unconfirmed


class LeaseWatchdog:
    """Runs an attempt while renewing its claim's lease every third of it. The renewals
    are timers, not a task: most jobs end before the first one is due, and pay nothing.

    The attempt is stopped when a renewal finds the claim gone (another worker took the
    job over), and when no renewal has been confirmed by RENEWAL_MARGIN of a lease
    before the last confirmed lease ends, whether the renewals failed or hang: from
    that moment another worker may take the job over, and the two must not run it at
    once. (A renewal the database confirms late cannot help: the attempt has stopped.)
    The latter stop is `unconfirmed` (the attempt is not counted) only if it came on
    time: a deadline that fires a whole margin late means the event loop was blocked
    (by the handler, most likely), which no retry will cure.
    """

    def __init__(self, store: JobStore, job: Job, lease: timedelta, clock: Clock) -> None:
        self._store = store
        self._job = job
        self._token = ClaimToken.of(job)
        self._lease = lease
        self._clock = clock
        self._lost = False
        self._running = False
        self._renewals: set[asyncio.Task[None]] = set()
        self._deadline: asyncio.TimerHandle | None = None
        self._unconfirmed = False

    async def run(self, work: Callable[[], Awaitable[T]]) -> T:
        """Await `work` in this task (no task of its own: it would cost every job); a
        lapsed claim cancels this task, and the cancellation becomes LeaseLostError."""
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None
        assert self._job.lease_until is not None
        self._task = task
        self._running = True
        self._watch(self._job.lease_until)
        self._timer = loop.call_later(self._lease.total_seconds() / 3, self._renew)
        try:
            return await work()
        except asyncio.CancelledError:
            if self._lost:
                task.uncancel()  # this cancellation was ours, and ends here
                if self._unconfirmed:
                    raise LeaseLostError(
                        "the database did not confirm the job's claim in time",
                        unconfirmed=True,
                    ) from None
                raise LeaseLostError("the job's claim lapsed while it ran") from None
            raise
        finally:
            self._running = False
            self._timer.cancel()
            if self._deadline is not None:
                self._deadline.cancel()

    def _watch(self, lease_until: datetime) -> None:
        """Stop the attempt RENEWAL_MARGIN before `lease_until`, unless a renewal
        confirmed in the meantime moves the deadline on."""
        margin = self._lease * RENEWAL_MARGIN
        left = (lease_until - margin - self._clock.now()).total_seconds()
        if self._deadline is not None:
            self._deadline.cancel()
        loop = asyncio.get_running_loop()
        self._deadline = loop.call_later(max(left, 0.0), self._lapse, loop.time() + left)

    def _lapse(self, due: float) -> None:
        """The deadline: no renewal confirmed in time. On time (less than the margin
        late, so before the lease ended), the database is to blame, not the job."""
        if not self._running or self._lost:
            return
        late = asyncio.get_running_loop().time() - due
        self._unconfirmed = late < (self._lease * RENEWAL_MARGIN).total_seconds()
        self._lose("no renewal of its claim was confirmed in time")

    def _lose(self, why: str) -> None:
        if self._running and not self._lost:
            log.warning("job %s: %s; stopping the attempt", self._job.id, why)
            self._lost = True
            self._task.cancel()

    def _renew(self) -> None:
        if self._running:
            renewal = asyncio.ensure_future(self._extend())
            self._renewals.add(renewal)
            renewal.add_done_callback(self._renewals.discard)

    async def _extend(self) -> None:
        until = self._clock.now() + self._lease
        try:
            held = await self._store.extend_lease(self._job.id, self._token, until)
        except Exception as exc:  # noqa: BLE001 - unconfirmed, whatever the cause
            # Not renewed, not known lost: the deadline stops the attempt in time if no
            # later renewal is confirmed.
            log.warning("job %s: cannot renew its claim (%s)", self._job.id, exc)
            held = True
        else:
            if held:
                self._watch(until)
        if not self._running:
            return
        if not held:
            self._lose("another worker took the job over")
            return
        self._timer = asyncio.get_running_loop().call_later(
            self._lease.total_seconds() / 3, self._renew
        )
