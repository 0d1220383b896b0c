"""The watchdog of a running attempt: it keeps what the attempt holds, or stops it.

An attempt may hold things that lapse unless renewed: its claim's lease on the job (see
``jobrail.worker.runner``) and the lock and concurrency slots its admission took (see
``jobrail.worker.gating``). One `Watchdog` keeps them all: it renews each every third of
its lifetime, and stops the attempt when a renewal finds the hold gone, or when no
renewal has been confirmed by a margin before the last confirmed one runs out. From
that moment another worker may take the job (or the lock) over, and the two must not
run at once.

The watchdog runs the attempt in the caller's task and renews on one timer (the earliest
of its holds' renewals and deadlines, and the attempt's own time limit), not in tasks of
its own: most jobs end before the first renewal is due and pay for one timer, nothing
more.

Clocks. Leases are written and compared with the clock of the worker that claims or
renews (`Clock`), not the database's: workers must agree on the time to better than
RENEWAL_MARGIN of a lease (1 s of the default 6 s), which NTP gives by far. A worker
whose clock runs that far ahead may claim a job whose holder is still running it. (The
lock's fence comes from Redis's clock, so fenced writes stay safe.) Taking the
database's now() in the claim and the renewal would lift the assumption, at the price
of a store that no longer runs on the clock it is given.
"""

import asyncio
import logging
import math
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime, timedelta
from typing import Protocol, TypeVar

from jobrail.jobs.domain import Job
from jobrail.jobs.ports import ClaimToken
from jobrail.kernel.clock import Clock
from jobrail.kernel.errors import TransientError
from jobrail.worker.job_store import JobStore

log = logging.getLogger("jobrail.runner")

T = TypeVar("T")

# A running attempt whose renewals are not confirmed stops this fraction of its lease
# before the lease would end: another worker may claim the job from that moment on.
RENEWAL_MARGIN = 1 / 6


class JobCancelledError(Exception):
    """Someone cancelled the running job: raised at a checkpoint
    (`JobContext.checkpoint`), or by the watchdog once it sees the cancel
    (``jobrail.worker.cancel_watch``)."""


class LeaseLostError(TransientError):
    """The attempt's claim could not be renewed (another worker took the job over, or
    the database was away for a whole lease); the attempt was stopped.

    `unconfirmed`: no one took the job over, the database just did not confirm a
    renewal in time, and the attempt stopped on time (before its lease ended). That
    attempt is given back rather than spent (see ``jobrail.worker.outcomes``)."""

    def __init__(self, message: str, *, unconfirmed: bool = False) -> None:
        super().__init__(message)
        self.unconfirmed = unconfirmed


class Kept(Protocol):
    """Something a running attempt holds that lapses unless renewed."""

    @property
    def renew_every_s(self) -> float:
        """How often to renew it."""
        ...

    def left_s(self) -> float:
        """Seconds from now until the attempt must stop unless a renewal is confirmed
        (the last confirmed end, less a safety margin)."""
        ...

    async def renew(self) -> bool:
        """Renew it: True if still held, False if it is gone (someone else has it).
        An exception means the renewal is not confirmed: the deadline then decides."""
        ...

    def taken(self) -> Exception:
        """The error that stops the attempt when a renewal found the hold gone."""
        ...

    def lapsed(self, late_s: float) -> Exception:
        """The error that stops the attempt when no renewal was confirmed in time; the
        deadline fired `late_s` late (a blocked event loop, when that is large)."""
        ...


class Watchdog:
    """Runs an attempt while keeping its holds (see the module)."""

    def __init__(
        self, holds: Sequence[Kept], job_id: object, time_limit_s: float | None = None
    ) -> None:
        """`time_limit_s`: the attempt's own timeout, on the same timer. Past it the
        attempt stops with TimeoutError, as under ``asyncio.timeout`` (which would be a
        second timer per job, and about 2 % of a worker's CPU: bench/README.md)."""
        self._holds = holds
        self._job_id = job_id
        self._time_limit_s = time_limit_s
        self._stop_at = math.inf
        self._renew_at = [math.inf] * len(holds)
        self._deadline = [math.inf] * len(holds)
        self._renewals: set[asyncio.Task[None]] = set()
        self._timer: asyncio.TimerHandle | None = None
        self._lost: Exception | None = None
        self._running = False

    async def run(self, work: Callable[[], Awaitable[T]]) -> T:
        """Await `work` in this task; a lost hold cancels this task, and the cancellation
        becomes the hold's error."""
        loop = self._loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None
        self._task = task
        now = loop.time()
        if self._time_limit_s is not None:
            self._stop_at = now + self._time_limit_s
        for i, hold in enumerate(self._holds):
            self._renew_at[i] = now + hold.renew_every_s
            self._deadline[i] = now + hold.left_s()
        self._running = True
        self._arm()
        try:
            result = await work()
        except asyncio.CancelledError:
            if self._lost is not None:
                task.uncancel()  # this cancellation was ours, and ends here
                raise self._lost from None
            raise
        else:
            if self._lost is not None:  # the work swallowed our cancellation and went on
                task.uncancel()
                if isinstance(self._lost, JobCancelledError):
                    raise self._lost  # a cancelled job never ends succeeded
            return result
        finally:
            self._running = False
            if self._timer is not None:
                self._timer.cancel()
            await self._renewals_ended()

    async def _renewals_ended(self) -> None:
        # A renewal left running would use the store after the attempt's caller is done
        # with it (at shutdown: after the connection pool is closed). One already known
        # to be too late is stopped; any other is short, and waited for.
        if not self._renewals:
            return
        if self._lost is not None:
            for renewal in self._renewals:
                renewal.cancel()
        await asyncio.wait(set(self._renewals))

    def _arm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        at = min([self._stop_at, *self._renew_at, *self._deadline])
        self._timer = self._loop.call_at(at, self._tick) if at < math.inf else None

    def _tick(self) -> None:
        self._timer = None
        if not self._running or self._lost is not None:
            return
        now = self._loop.time()
        if self._stop_at <= now:  # the attempt's time is up (no warning: the runner says)
            self._stop(TimeoutError())
            return
        for i, hold in enumerate(self._holds):
            if self._deadline[i] <= now:
                self._lose(hold.lapsed(now - self._deadline[i]))
                return
            if self._renew_at[i] <= now:
                self._renew_at[i] = math.inf  # the renewal sets the next one when it ends
                renewal = asyncio.ensure_future(self._renew(i, hold))
                self._renewals.add(renewal)
                renewal.add_done_callback(self._renewals.discard)
        self._arm()

    async def _renew(self, i: int, hold: Kept) -> None:
        try:
            held = await hold.renew()
        except Exception as exc:  # noqa: BLE001 - unconfirmed, whatever the cause
            # Not renewed, not known lost: the deadline stops the attempt in time if no
            # later renewal is confirmed.
            log.warning("job %s: cannot renew what its attempt holds (%s)", self._job_id, exc)
            held = True
        else:
            if held:
                self._deadline[i] = self._loop.time() + hold.left_s()
        if not self._running or self._lost is not None:
            return
        if not held:
            self._lose(hold.taken())
            return
        self._renew_at[i] = self._loop.time() + hold.renew_every_s
        self._arm()

    def _lose(self, error: Exception) -> None:
        level = logging.INFO if isinstance(error, JobCancelledError) else logging.WARNING
        log.log(level, "job %s: %s; stopping the attempt", self._job_id, error)
        self._stop(error)

    def _stop(self, error: Exception) -> None:
        self._lost = error
        self._task.cancel()


class KeptClaim:
    """The claim's lease on the job, renewed every third of the lease. It must be given
    up RENEWAL_MARGIN of a lease before the last confirmed lease ends."""

    def __init__(
        self, store: JobStore, job: Job, token: ClaimToken, lease: timedelta, clock: Clock
    ) -> None:
        assert job.lease_until is not None
        self._store = store
        self._job = job
        self._token = token
        self._lease = lease
        self._clock = clock
        self._until: datetime = job.lease_until
        self._margin = lease * RENEWAL_MARGIN
        self.renew_every_s = lease.total_seconds() / 3

    def left_s(self) -> float:
        return (self._until - self._margin - self._clock.now()).total_seconds()

    async def renew(self) -> bool:
        until = self._clock.now() + self._lease
        held = await self._store.extend_lease(self._job.id, self._token, until)
        if held:
            self._until = until
        return held

    def taken(self) -> Exception:
        return LeaseLostError("the job's claim lapsed while it ran (another worker took it over)")

    def lapsed(self, late_s: float) -> Exception:
        # On time (less than the margin late, so before the lease ended), the database
        # is to blame, not the job: the attempt is not counted. A whole margin late
        # means the event loop was blocked (by the handler, most likely), which no
        # retry will cure.
        if late_s < self._margin.total_seconds():
            return LeaseLostError(
                "the database did not confirm the job's claim in time", unconfirmed=True
            )
        return LeaseLostError("the job's claim lapsed while it ran")
