"""The gate port: what the limits middleware (``jobrail.worker.admission``) asks of the job
rate limits and locks before an attempt.

``JobGate.enter`` admits a job on everything its type declares, in one round trip,
or says how long to wait (`Deferred`). Admitted, the job runs holding the `Admitted`
admission, whose lock and slots the attempt's watchdog keeps renewed while it runs
(``jobrail.worker.watchdog``), and which releases them at the end. The
Redis and in-memory implementation is ``jobrail.worker.gate``.
"""

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Protocol

from jobrail.jobs.domain import WaitsOn
from jobrail.limits.model import JobLimits
from jobrail.worker.watchdog import Kept


def job_owner(job_id: object) -> str:
    """The owner prefix of the holder tokens of a job's admissions: operators see whose
    a lock or slot is, and a later admission of the same job tells its own job's holders
    from others'."""
    return f"{job_id}/"


def owner_job(token: str | None) -> str | None:
    """The id of the job a holder token was made for (`job_owner` starts it), or None:
    a token of an admission for no job, or none."""
    head, slash, _ = (token or "").partition("/")
    try:
        return str(uuid.UUID(head)) if slash else None
    except ValueError:
        return None


@dataclass(frozen=True, slots=True)
class Deferred:
    """The limits turned the job away for now: try again after `delay`."""

    delay: timedelta
    reason: str
    prepaid: tuple[str, ...] = ()
    """The reservations the job now holds, as `reservation` strings, for its message."""
    unavailable: bool = False
    """Deferred because the limits store could not be reached (counted in `outages`)."""
    own: bool = False
    """Denied only by locks or slots that earlier admissions of the same job hold (a
    dead attempt's, typically): the caller may take them over once it has made sure,
    by claiming the job, that none of those admissions' attempts is alive."""
    waits_on: tuple[WaitsOn, ...] = ()
    """What turned the job away: each limit or lock that denied it, and its key."""


class Admitted(Protocol):
    """An admission: hold it while the job runs, release it when the job ends."""

    @property
    def fence(self) -> int | None:
        """The lock's fencing token, for writes guarded by it (None: no lock)."""
        ...

    @property
    def kept(self) -> Kept | None:
        """What the attempt's watchdog must keep renewed while the job runs (the lock and
        slot leases), or None if nothing held lapses."""
        ...

    @property
    def start_within(self) -> timedelta | None:
        """How long after the admission was asked for the job's handler must start, or
        its token buckets' tokens are no longer its to use (None: it has none). A job
        that starts later competes for its tokens again."""
        ...

    def started(self) -> None:
        """The job's handler starts on this admission (it was on time for its tokens):
        what the limits' `admitted` counter counts, once per job that starts."""
        ...

    async def release(self, *, refund: bool = False) -> None:
        """Give back everything held (`refund`: the tokens taken too, the job never ran)."""
        ...


class JobGate(Protocol):
    async def enter(
        self,
        declared: JobLimits,
        keys: Sequence[str],
        deferrals: int = 0,
        prepaid: Sequence[str] = (),
        outages: int = 0,
        owner: str = "",
        take_over: bool = False,
    ) -> Admitted | Deferred:
        """Admit the job on its limits' `keys` (as `declared.keys` fills them in), or say
        how long to wait. `prepaid`: the job's reservations from its last deferral;
        `outages`: its deferrals in a row while the limits store was unreachable;
        `owner` (`job_owner`) starts the holder tokens; `take_over` takes the locks and
        slots the job's own earlier admissions hold."""
        ...
