"""Taking over a dead worker's job.

When a worker dies, RabbitMQ hands its unacknowledged messages to the other consumers at
once, at the head of the queue. The job row is still claimed by the dead attempt, so the
claim fails; the worker then *holds* the delivery (`wait_out_lease`), looking at the row
about once a second, and claims the job as soon as that lease has ended: a dead worker's
job starts again about one lease after its death, whatever the backlog behind it.
(Re-publishing the message to come back at the lease end, as the runner once did, put it
at the back of the queue: with a backlog, the job waited for all of it.) A delivery whose
job stays leased for `HOLD_LEASES` leases belongs to a live attempt (a duplicate message,
or one RabbitMQ redelivered after a channel closed under a working worker): the runner
re-publishes it to come back when that lease ends, so that it does not hold a worker slot
for a long job's whole run.

A job with a lock or concurrency slots: the dead attempt's lock (its TTL often far
longer than the lease) would turn the delivery away. The holder tokens of a job's
admissions name the job (``jobs.gating.job_owner``), so the admission says when only
the job's own earlier admissions hold what it needs (``Deferred.own``). The limits
middleware then lets the job be claimed first (holding the delivery while the old lease
lasts, as above) and, claimed, takes the lock and slots over: a claim means no other
attempt of the job is alive (the dead one stopped itself before its lease ended; a
duplicate delivery's admission will fail its claim). The lock's fence grows, so the dead
attempt's fenced writes are refused. Turned away at that point (a rate limit), the job
gives its claim and attempt back and is deferred (``GiveBack``).

Worker heartbeats would detect a death about as fast, but need a table, a writer per
process and a second liveness rule beside the lease; the short lease is the one rule,
and only jobs longer than a third of it write anything more.
"""

import logging
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta

from jobrail.jobs.domain import Job, JobStatus
from jobrail.jobs.ports import ClaimToken
from jobrail.kernel.clock import Clock

log = logging.getLogger("jobrail.runner")

# A delivery whose job another attempt holds looks at the job this often while it waits
# for that lease to end (so that it lets go soon after that attempt finishes)...
TAKEOVER_POLL = timedelta(seconds=1)
# ...for at most this many of the job's leases: longer, and the holder is alive.
HOLD_LEASES = 2


async def wait_out_lease(
    leased: Job,
    until: datetime,
    read: Callable[[], Awaitable[Job | None]],
    clock: Clock,
    sleep: Callable[[float], Awaitable[None]],
) -> Job | None:
    """Hold the delivery while the attempt that holds `leased` keeps its lease, reading
    the job (`read`) every TAKEOVER_POLL. None once that lease has ended or the attempt
    has ended (claim again, or find the job finished); the job as last read if it is
    still leased at `until` (its attempt is alive and renewing)."""
    token = ClaimToken.of(leased)
    job = leased
    while True:
        now = clock.now()
        assert job.lease_until is not None
        if job.lease_until <= now:
            log.info(
                "job %s: the lease of attempt %d ended (its worker stopped renewing it); "
                "taking the job over",
                job.id,
                token.attempt,
            )
            return None
        if now >= until:
            return job
        wake_at = min(job.lease_until, until, now + TAKEOVER_POLL)
        await sleep((wake_at - now).total_seconds())
        current = await read()
        if (
            current is None
            or current.status is not JobStatus.RUNNING
            or current.lease_until is None
            or ClaimToken.of(current) != token
        ):
            return None
        job = current
