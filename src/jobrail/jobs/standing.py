"""Where a job that waits to start stands (``GET /jobs/{id}``'s `waiting` and the
`waiting` frames of its event stream): why it waits, its place in its tenant's line
under fair dispatch, and an estimate of when it starts.

Computed when it is read, from the job's row, the pauses, its line
(``jobrail.jobs.ports.LinePlaces``) and the queue's figures the dispatcher writes:
nothing is written per job. The reason is the first of these that applies:

- ``paused``: an operator paused its queue, type or tenant: nothing moves until the
  resume (its place is shown, no estimate);
- ``debounce``: its debounce window is open (`until` it closes);
- ``run_at``: it is due later (its `run_at` or `delay`, `until` then);
- ``retry``: an attempt failed, and the next one is due `until`;
- ``priority``: held in its tenant's line (fair dispatch), with jobs of a higher
  priority ahead of it there;
- ``fair_share``: held in its tenant's line, behind the jobs ahead of it there and
  taking turns with the other tenants;
- what turned it away at its last try, as its limits noted it (``Job.waiting``):
  ``rate_limit``, ``concurrency``, ``lock``, ``limits_store`` (the limits could not be
  asked), ``limit`` (a kind of a host's own).

A job that is due, not held and turned away by nothing is with the workers: it has no
standing. So with fair dispatch off a job never has a place in line.

The estimate: its tenant gets `weight / active_weight` of the queue's releases, so
about `ahead * active_weight / weight` jobs of all tenants start before it
(`ahead_in_queue`, never fewer than its own tenant's), at the queue's `drain_per_s`.
"""

from dataclasses import dataclass
from datetime import datetime, timedelta
from math import ceil, isfinite

from jobrail.jobs.domain import CLAIMABLE_STATUSES, Job, JobStatus, WaitsOn
from jobrail.jobs.ports import LinePlace, Pause

PAUSED = "paused"
DEBOUNCE = "debounce"
RUN_AT = "run_at"
RETRY = "retry"
PRIORITY = "priority"
FAIR_SHARE = "fair_share"
UNNAMED_LIMIT = "limit"

# An estimate further off than this is no estimate (a queue measured as all but idle).
FURTHEST_ETA = timedelta(days=366)


@dataclass(frozen=True, slots=True)
class Standing:
    """Why a job waits to start (`reason`, see the module), since when, until when if
    that is known (its run_at, window or retry, or when its limits let it try again),
    what its limits turned it away on (`on`), the pause that holds it, and, held in its
    tenant's line, its place there (`position`, 1: next) and the estimate."""

    reason: str
    since: datetime
    until: datetime | None = None
    on: tuple[WaitsOn, ...] = ()
    pause: Pause | None = None
    position: int | None = None
    ahead_capped: bool = False
    higher_priority_ahead: int | None = None
    ahead_in_queue: int | None = None
    eta: datetime | None = None

    @property
    def ahead_in_tenant(self) -> int | None:
        return None if self.position is None else self.position - 1


def standing_of(
    job: Job, now: datetime, pause: Pause | None = None, place: LinePlace | None = None
) -> Standing | None:
    """Where `job` stands as of `now` (None: it does not wait to start), given the pause
    that holds it and, if it is held, its `place` in its tenant's line."""
    if job.status not in CLAIMABLE_STATUSES:
        return None
    on = job.waiting.on if job.waiting is not None else ()
    line = place if job.is_held else None
    if pause is not None:
        return _in_line(Standing(PAUSED, pause.paused_at, on=on, pause=pause), line, None)
    if not job.is_due(now) and job.run_after is not None:
        if job.status is JobStatus.RETRYING and job.waiting is not None:
            # Given back after its claim: its limits turned it away (see Job.throttled).
            reason, since = (on[0].kind if on else UNNAMED_LIMIT), job.waiting.since
        elif job.status is JobStatus.RETRYING:
            reason, since = RETRY, job.updated_at
        else:
            reason = RUN_AT if job.debounce_key is None else DEBOUNCE
            since = job.created_at
        return _in_line(Standing(reason, since, job.run_after, on), line, now)
    if line is not None:
        reason = PRIORITY if line.higher_ahead else FAIR_SHARE
        return _in_line(Standing(reason, job.held_since or job.created_at, on=on), line, now)
    if job.waiting is not None:
        kind = on[0].kind if on else UNNAMED_LIMIT
        return Standing(kind, job.waiting.since, job.waiting.until, on)
    return None


def _in_line(standing: Standing, place: LinePlace | None, now: datetime | None) -> Standing:
    """`standing` with its place in line, and, as of `now` (None: it does not move), the
    estimate of its start (no sooner than its `until`)."""
    if place is None:
        return standing
    ahead_in_queue, eta = _estimate(place, now) if now is not None else (None, None)
    if eta is not None and standing.until is not None:
        eta = max(eta, standing.until)
    return Standing(
        standing.reason,
        standing.since,
        standing.until,
        standing.on,
        standing.pause,
        position=place.ahead + 1,
        ahead_capped=place.capped,
        higher_priority_ahead=place.higher_ahead,
        ahead_in_queue=ahead_in_queue,
        eta=eta,
    )


def _estimate(place: LinePlace, now: datetime) -> tuple[int | None, datetime | None]:
    drain, active = place.drain_per_s, place.active_weight
    if drain is None or active is None or not (isfinite(drain) and isfinite(active)):
        return None, None
    if drain <= 0 or active <= 0 or place.weight <= 0:
        return None, None
    # Figures written a second ago may not count its tenant yet: at least its own line.
    ahead = ceil(place.ahead * max(active / place.weight, 1.0))
    wait_s = ahead / drain
    if wait_s > FURTHEST_ETA.total_seconds():
        return ahead, None
    return ahead, now + timedelta(seconds=wait_s)
