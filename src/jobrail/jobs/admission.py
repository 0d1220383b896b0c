"""The job's rate limits and its lock, as one middleware of the attempt's chain
(``jobrail.jobs.middleware``): asked of the gate (``jobrail.jobs.gating``, implemented on
Redis by ``jobrail.limits.gate``) before the claim, held while the job runs, released
after.

Before the claim, the job's limits and lock are acquired in one round trip (the gate
coalesces the admissions of the deliveries that start in the same event-loop turn).
Turned away, the message goes round again (`deferred_message`): no attempt spent, the
tokens reserved for it carried, and the outage backoff counting only the deferrals in a
row while the limits store was away.

Turned away only by locks or slots the job's own earlier admissions hold (a dead
attempt's: ``Deferred.own``), the job is let in without them and, once claimed, takes
them over (see ``jobrail.jobs.takeover``): a claim means no other attempt of the job is
alive. Turned away at that point (by a rate limit), the job gives its claim and attempt
back (`GiveBack`).

Admitted, the lock's fence goes to the handler and the lock and slot leases to the
attempt's watchdog, which keeps them renewed while the handler runs; after the attempt
everything is released in one more round trip, and the tokens refunded if the job never
started (another worker claimed it first).
"""

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from jobrail.jobs.attempt import Attempt, JobRun
from jobrail.jobs.domain import Wait
from jobrail.jobs.gating import Admitted, Deferred, JobGate, job_owner
from jobrail.jobs.messages import JobMessage
from jobrail.jobs.middleware import Defer, GiveBack, GiveUp, NotStartable
from jobrail.kernel.clock import Clock
from jobrail.limits.model import JobLimits

log = logging.getLogger("jobrail.runner")

# How late a job may come back and still use the token reserved for it.
RESERVATION_GRACE = timedelta(milliseconds=25)


@dataclass(frozen=True, slots=True)
class Held:
    """What one attempt holds of its limits: `admitted` is None while only the job's own
    earlier admissions hold them (taken over after the claim)."""

    keys: tuple[str, ...]
    admitted: Admitted | None


class LimitsAndLock:
    """The attempt middleware of the job's rate limits, concurrency slots and lock."""

    def __init__(self, gate: JobGate, clock: Clock) -> None:
        self._gate = gate
        self._clock = clock

    def applies_to(self, run: JobRun) -> bool:
        return bool(run.limits)

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
        verdict = await self._enter(delivery, limits, keys)
        if not isinstance(verdict, Deferred):
            return Held(keys, verdict)
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
        if admitted is None:
            # The claim succeeded, so no other attempt of this job is alive (the one
            # before stopped itself before its lease ended): the locks and slots the
            # job's earlier admissions hold are a dead attempt's, or a duplicate
            # delivery's whose claim will fail. Take them over; the lock's fence grows,
            # so the dead attempt's fenced writes are refused.
            delivery = attempt.delivery
            taken = await self._enter(delivery, attempt.run.limits, state.keys, take_over=True)
            if isinstance(taken, Deferred):
                log.info(
                    "job %s deferred %.3fs after its claim: %s",
                    delivery.job_id,
                    taken.delay.total_seconds(),
                    taken.reason,
                )
                now = self._clock.now()
                message = deferred_message(delivery, taken, now + taken.delay, now)
                return GiveBack(message, taken.reason, now)
            admitted = taken
            state = Held(state.keys, taken)
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
    ) -> Admitted | Deferred:
        """Ask the gate for the job's limits and lock. With `take_over`, the locks and
        slots the job's own earlier admissions hold are taken from them (the job is
        claimed: none of those attempts is alive)."""
        now = self._clock.now()
        # A reserved token must be used on time: a job that comes back late competes
        # again, so that late jobs cannot bunch their calls together.
        on_time = delivery.not_before is not None and now <= delivery.not_before + RESERVATION_GRACE
        return await self._gate.enter(
            limits,
            keys,
            delivery.deferrals,
            delivery.prepaid if on_time else (),
            outages=delivery.outages,
            owner=job_owner(delivery.job_id),
            take_over=take_over,
        )


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
