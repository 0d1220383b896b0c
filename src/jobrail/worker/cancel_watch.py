"""A running job stops when someone cancels it, whether or not its handler checkpoints.

``POST /jobs/{id}/cancel`` (and a batch's or chain's cancel, and the bulk cancel) marks
a running job `cancel_requested` in the jobs table. The worker running it learns of it
through `WatchedCancel`, one more hold of the attempt's watchdog
(``jobrail.worker.watchdog``): on the watchdog's one timer, every `CANCEL_POLL_S` while
the job runs, it reads the job's `cancel_requested` (a primary-key read). Once set, the
watchdog cancels the handler's task: its ``finally`` blocks run, and the attempt ends
as a cancel checkpoint's does (`JobCancelledError`: the job is cancelled, its event
written, its lock and slots released, its lease given up with the record).

Why a read of its own rather than the lease renewal's answer: a job whose timeout is
shorter than the lease is never renewed, and a renewal comes every third of a lease
(2 s of 6 s), too late for "stopped within about two seconds" once the read itself is
counted. Why no LISTEN/NOTIFY: it needs a session of its own, which a
transaction-mode PgBouncer does not keep. A job that ends before `CANCEL_POLL_S` never
reads; a longer one reads once a second, a cheaper statement than the renewal's update.

A worker killed after the cancel was accepted loses nothing: the job's next attempt
sees `cancel_requested` at its claim and ends cancelled without running
(``jobrail.worker.runner``).

A handler keeps a critical section whole with `JobContext.shielded`: a stop (a cancel,
a timeout, a lost lease) that comes during it takes effect once it returns.
"""

import logging
import math

from jobrail.kernel.errors import StoreUnavailableError
from jobrail.kernel.ids import JobId
from jobrail.worker.job_store import JobStore
from jobrail.worker.watchdog import JobCancelledError

log = logging.getLogger("jobrail.runner")

CANCEL_POLL_S = 1.0
"""How often a running job looks whether it was cancelled."""


class WatchedCancel:
    """A running job's `cancel_requested`, as a hold of its watchdog: "taken" once set."""

    def __init__(self, store: JobStore, job_id: JobId, every_s: float = CANCEL_POLL_S) -> None:
        self._store = store
        self._job_id = job_id
        self.renew_every_s = every_s

    def left_s(self) -> float:
        return math.inf  # nothing lapses: an unanswered read just waits for the next

    async def renew(self) -> bool:
        try:
            return not await self._store.cancel_requested(self._job_id)
        except StoreUnavailableError as exc:
            # Read again at the next tick. No warning: this read comes once a second per
            # running job, and the lease's renewal already says that the database is away.
            log.debug("job %s: cannot read whether it was cancelled (%s)", self._job_id, exc)
            return True

    def taken(self) -> Exception:
        return JobCancelledError(f"job {self._job_id} was cancelled while it ran")

    def lapsed(self, late_s: float) -> Exception:  # pragma: no cover - left_s is infinite
        raise AssertionError("a cancel watch has no deadline")
