"""The admission stage: a job's rate limits and its lock, asked of the gate before the
claim (``jobrail.jobs.gating``, implemented on Redis by ``jobrail.limits.gate``).

Admitted, the job runs inside the hold the gate gave (which renews the lock and slots
while it runs and releases them at the end). Turned away, the message goes round again
(`deferred_message`): no attempt spent, the tokens reserved for it carried, and the
outage backoff counting only the deferrals in a row while the limits store was away.
"""

from collections.abc import Sequence
from datetime import datetime, timedelta

from jobrail.jobs.gating import Admitted, Deferred, JobGate, job_owner
from jobrail.jobs.messages import JobMessage
from jobrail.kernel.clock import Clock
from jobrail.limits.model import JobLimits

# How late a job may come back and still use the token reserved for it.
RESERVATION_GRACE = timedelta(milliseconds=25)


class Admission:
    def __init__(self, gate: JobGate | None, clock: Clock) -> None:
        self._gate = gate
        self._clock = clock

    async def enter(
        self,
        delivery: JobMessage,
        limits: JobLimits,
        keys: Sequence[str],
        *,
        take_over: bool = False,
    ) -> Admitted | Deferred:
        """Ask the gate for the job's limits and lock (`keys` filled in). With
        `take_over`, the locks and slots the job's own earlier admissions hold are taken
        from them (the caller has claimed the job: none of those attempts is alive)."""
        if self._gate is None:
            raise RuntimeError(f"job type {delivery.job_type} declares limits but no gate is set")
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


def deferred_message(delivery: JobMessage, verdict: Deferred, not_before: datetime) -> JobMessage:
    """The message again after the limits turned it away (see the module)."""
    return delivery.again(
        not_before,
        deferred=True,
        prepaid=verdict.prepaid,
        outages=delivery.outages + 1 if verdict.unavailable else 0,
    )
