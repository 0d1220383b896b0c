"""The job's rate limits and its lock, as one middleware of the attempt's chain
(``jobrail.worker.attempt``): asked of the gate (``jobrail.worker.gating``, implemented on
Redis by ``jobrail.worker.gate``) before the claim, held while the job runs, released
after.

Before the claim, the job's limits and lock are acquired in one round trip (the gate
coalesces the admissions of the deliveries that start in the same event-loop turn).
Turned away, the message goes round again (`deferred_message`): no attempt spent, the
tokens reserved for it carried, and the outage backoff counting only the deferrals in a
row while the limits store was away.

Turned away only by locks or slots the job's own earlier admissions hold (a dead
attempt's: ``Deferred.own``), the job is let in without them and, once claimed, takes
them over (see ``jobrail.worker.outcomes``): a claim means no other attempt of the job is
alive. Turned away at that point (by a rate limit), the job gives its claim and attempt
back (`GiveBack`).

Admitted, the lock's fence goes to the handler and the lock and slot leases to the
attempt's watchdog, which keeps them renewed while the handler runs; after the attempt
everything is released in one more round trip, and the tokens refunded if the job never
started (another worker claimed it first).

A token bucket keeps to its rate at the moment the handler starts, which is what a
vendor sees, not at the moment the store said yes: between the two lies the claim, and
a database that stalls for a second would otherwise let every job admitted meanwhile
start at once when it answers. So the admission says by when the job must start
(`Admitted.start_within`, see ``jobrail.worker.gate``), and the job is checked just
before its handler starts, after the claim. A job later than that competes for its
tokens again (`_enter` without its reservations, taking over its own locks and slots),
its claim given back if the bucket says wait.
"""

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from jobrail.jobs.domain import Wait
from jobrail.jobs.messages import JobMessage
from jobrail.kernel.clock import Clock
from jobrail.limits.model import JobLimits
from jobrail.worker.attempt import (
    Attempt,
    Defer,
    Ending,
    GiveBack,
    GiveUp,
    JobRun,
    NotStartable,
    Step,
)
from jobrail.worker.gating import Admitted, Deferred, JobGate, job_owner

log = logging.getLogger("jobrail.runner")

# A job late for its tokens twice in a row (the store answers slower than a token's
# room: an overloaded worker) gives its claim back and comes back this much later.
LATE_AGAIN_RETRY = timedelta(seconds=1)


@dataclass(frozen=True, slots=True)
class Held:
    """What one attempt holds of its limits: `admitted` is None while only the job's own
    earlier admissions hold them (taken over after the claim). `start_by`: when the
    handler must have started to use the admission's tokens (None: it has none)."""

    keys: tuple[str, ...]
    admitted: Admitted | None
    start_by: datetime | None = None


class LimitsAndLock:
    """The attempt middleware of the job's rate limits, concurrency slots and lock."""

    def __init__(self, gate: JobGate, clock: Clock) -> None:
        self._gate = gate
        self._clock = clock

    def applies_to(self, run: JobRun) -> bool:
        return bool(run.limits)

    async def __call__(self, attempt: Attempt, call_next: Step) -> Ending:
        """Admit the delivery before the claim, check it again once claimed (taking
        over, or giving the claim back), and release what it holds at the end."""
        admitted = await self.before_claim(attempt)
        if not isinstance(admitted, Held):
            return admitted  # turned away before the claim
        held = admitted

        async def claimed(attempt: Attempt) -> GiveBack | None:
            nonlocal held
            after = await self.after_claim(attempt, held)
            if isinstance(after, GiveBack):
                return after
            held = after
            return None

        attempt.on_claimed += (claimed,)
        try:
            return await call_next(attempt)
        finally:
            try:
                await self.after_attempt(attempt, held)
            except Exception:
                # Logged, never raised: the outcome is recorded, and its messages go.
                log.exception("job %s: releasing its limits failed", attempt.delivery.job_id)

    async def before_claim(self, attempt: Attempt) -> Held | Defer | NotStartable | GiveUp:
        delivery, limits = attempt.delivery, attempt.run.limits
        keys = delivery.limit_keys
        if keys is None or len(keys) != len(limits.all()):
            # An older message without its keys: read the job to fill them in.
            now = self._clock.now()
            current = await attempt.read()
            if (
                current is None
                or not current.can_start(now)
                # A message naming a job of another tenant or type: its keys would be
                # made from a payload of another shape. Refused where a claim would be.
                or not delivery.names(current)
            ):
                return NotStartable(current, now)
            try:
                keys = tuple(limits.keys({**current.payload, "tenant_id": current.tenant_id}))
            except (KeyError, TypeError, ValueError) as exc:
                # A row written past the API (its payload was checked on enqueue): no
                # attempt would ever get its keys.
                return GiveUp(f"its limits' keys cannot be made from its payload ({exc!r})")
        verdict, start_by = await self._enter(delivery, limits, keys)
        if not isinstance(verdict, Deferred):
            return Held(keys, verdict, start_by)
        if verdict.own:
            return Held(keys, None)  # held by the job's own earlier admissions: claim first
        # From the clock after Redis answered: never earlier than the reserved token.
        now = self._clock.now()
        until = now + verdict.delay
        since = delivery.waiting_since or now
        max_wait = attempt.run.max_wait
        if max_wait is not None and until - since > max_wait:
            return GiveUp(
                f"waited longer than its type allows ({max_wait.total_seconds():g} s, "
                f"since {since.isoformat()}): {verdict.reason}"
            )
        log.info(
            "job %s deferred %.3fs: %s",
            delivery.job_id,
            verdict.delay.total_seconds(),
            verdict.reason,
        )
        return Defer(
            deferred_message(delivery, verdict, until, since),
            Wait(on=verdict.waits_on, until=until, since=since),
        )

    async def after_claim(self, attempt: Attempt, state: Held) -> Held | GiveBack:
        admitted = state.admitted
        late = admitted is not None and self._late(state.start_by)
        if admitted is None or late:
            # The claim succeeded, so no other attempt of this job is alive (the one
            # before stopped itself before its lease ended): the locks and slots the
            # job's earlier admissions hold are a dead attempt's, or a duplicate
            # delivery's whose claim will fail, or this attempt's own admission, which
            # came too late for its tokens. Take them over; the lock's fence grows, so
            # the earlier holders' fenced writes are refused. A late job competes for
            # its tokens again, reservations and all: their time has gone too.
            delivery = attempt.delivery
            if late:
                log.info(
                    "job %s started too late for its tokens: admitting it again", delivery.job_id
                )
            taken, start_by = await self._enter(
                delivery, attempt.run.limits, state.keys, take_over=True, reserved=not late
            )
            if not isinstance(taken, Deferred) and self._late(start_by):
                await taken.release()
                taken = Deferred(LATE_AGAIN_RETRY, "started too late for its tokens twice")
            if isinstance(taken, Deferred):
                if admitted is not None:
                    await admitted.release()  # its locks and slots; no tokens back
                log.info(
                    "job %s deferred %.3fs after its claim: %s",
                    delivery.job_id,
                    taken.delay.total_seconds(),
                    taken.reason,
                )
                now = self._clock.now()
                message = deferred_message(delivery, taken, now + taken.delay, now)
                wait = Wait(on=taken.waits_on, until=now + taken.delay, since=now)
                return GiveBack(message, taken.reason, now, wait)
            admitted = taken
            state = Held(state.keys, taken, start_by)
        admitted.started()
        attempt.fence = admitted.fence
        if (kept := admitted.kept) is not None:
            attempt.kept += (kept,)
        return state

    async def after_attempt(self, attempt: Attempt, state: Held) -> None:
        if state.admitted is not None:
            await state.admitted.release(refund=attempt.job is None)

    async def _enter(
        self,
        delivery: JobMessage,
        limits: JobLimits,
        keys: Sequence[str],
        *,
        take_over: bool = False,
        reserved: bool = True,
    ) -> tuple[Admitted | Deferred, datetime | None]:
        """Ask the gate for the job's limits and lock (with its reservations, unless not
        `reserved`), and say by when an admitted job must start (None: whenever). With
        `take_over`, the locks and slots the job's own earlier admissions hold are taken
        from them (the job is claimed: none of those attempts is alive)."""
        # Before the request leaves: the start's deadline errs on the early side. (The
        # store itself refuses a reservation brought back after its time.)
        asked = self._clock.now()
        verdict = await self._gate.enter(
            limits,
            keys,
            delivery.deferrals,
            delivery.prepaid if reserved else (),
            outages=delivery.outages,
            owner=job_owner(delivery.job_id),
            take_over=take_over,
        )
        within = None if isinstance(verdict, Deferred) else verdict.start_within
        return verdict, None if within is None else asked + within

    def _late(self, start_by: datetime | None) -> bool:
        return start_by is not None and self._clock.now() > start_by


def deferred_message(
    delivery: JobMessage, verdict: Deferred, not_before: datetime, now: datetime
) -> JobMessage:
    """The message again after the limits turned it away at `now` (see the module)."""
    return delivery.again(
        not_before,
        deferred=True,
        prepaid=verdict.prepaid,
        outages=delivery.outages + 1 if verdict.unavailable else 0,
        waiting_since=now,
    )
