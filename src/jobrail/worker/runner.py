"""The worker side of every job: admit → claim → attempt → record.

This module is the loop. ``jobrail.worker.outcomes`` decides what an attempt's end
means, where a message that cannot run now goes, and when a dead worker's job is taken
over; ``jobrail.worker.watchdog`` keeps what a running attempt holds. The attempt's
middleware (``jobrail.worker.attempt``; the limits and lock are one) are composed around
the runner's step, claim → attempt → record, once per job type. A flow member's end is
recorded with its flow (``jobrail.worker.flow_recording``), every other job's in the store.

A delivery is acknowledged only once the outcome is in the database (or the message was
safely re-published); while the database or the broker is away the runner waits,
holding the delivery: a crash at any point means redelivery, never loss.

A claim is a lease on the job (`RunnerConfig.lease`, a few seconds, or the job's timeout
and grace when shorter), renewed while the job runs and given up shortly before it would
end unconfirmed (``jobrail.worker.watchdog``): a job that ends before its first renewal
costs one claim and one record. A handler that blocks the event loop for longer than a
lease cannot renew: blocking work belongs in a thread, or needs a longer
`JOBRAIL_JOBS__LEASE_S`. Leases are written with the worker's clock (see
``jobrail.worker.watchdog``, "Clocks"). A job past its deadline is expired, never run.
"""

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime, timedelta
from typing import TypeVar, assert_never

from jobrail.jobs.domain import Job
from jobrail.jobs.messages import JobMessage, Outgoing
from jobrail.jobs.ports import ClaimToken
from jobrail.jobs.publishing import OutboxDispatcher, Publisher
from jobrail.jobs.retry import RetryPolicy, backoff
from jobrail.kernel.clock import Clock
from jobrail.kernel.errors import BrokerUnavailableError, StoreUnavailableError
from jobrail.kernel.ids import JobId
from jobrail.worker.attempt import (
    Attempt,
    AttemptMiddleware,
    Defer,
    Ending,
    GiveBack,
    GiveUp,
    JobObserver,
    JobRun,
    Leased,
    NoObserver,
    NotStartable,
    Recorded,
    RunnerConfig,
    Step,
    compose,
)
from jobrail.worker.cancel_watch import WatchedCancel
from jobrail.worker.context import JobContext
from jobrail.worker.failures import failure_of
from jobrail.worker.job_store import JobIdentity, JobStore
from jobrail.worker.outcomes import (
    HOLD_LEASES,
    Next,
    classify,
    conclude,
    failed,
    leased_elsewhere,
    sent_on,
    stored_result,
    wait_out_lease,
    when_due,
)
from jobrail.worker.progress import ProgressReporter
from jobrail.worker.wait_notes import WaitNotes
from jobrail.worker.watchdog import Kept, KeptClaim, Watchdog

__all__ = ["JobObserver", "JobRun", "JobRunner", "RunnerConfig"]

log = logging.getLogger("jobrail.runner")

T = TypeVar("T")

FIRST_WAIT_S = 0.05
# Chains composed for this many job types at most (a process has a few dozen).
_CHAINS_MAX = 1024


class JobRunner:
    def __init__(
        self,
        store: JobStore,
        dispatcher: OutboxDispatcher,
        publisher: Publisher,
        clock: Clock,
        retry: RetryPolicy,
        config: RunnerConfig,
        middleware: Sequence[AttemptMiddleware] = (),
        observer: JobObserver | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        wait_notes: WaitNotes | None = None,
        flows: JobStore | None = None,
    ) -> None:
        """`middleware`: the attempt's chain, in order (see ``jobrail.worker.attempt``);
        `wait_notes`: where a deferred job notes what it waits for; `flows`: where the
        outcomes of batch and chain members are recorded (else `store`)."""
        self._sleep = sleep
        self._wait_notes = wait_notes
        self._middleware = tuple(middleware)
        self._chains: dict[int, tuple[JobRun, Step]] = {}
        self._observer = observer or NoObserver()
        self._store = store
        self._flows = flows or store
        self._dispatcher = dispatcher
        self._publisher = publisher
        self._clock = clock
        self._retry = retry
        self._config = config

    async def run(self, delivery: JobMessage, job_run: JobRun) -> None:
        """Run one delivery to its end. Returns once the outcome is recorded or the
        message is safely back on the bus; only then may the delivery be acknowledged."""
        if delivery.deadline is not None and delivery.deadline <= self._clock.now():
            await self._expire(delivery.job_id)  # neither the limits nor a claim are asked
            return
        round_again, wait_s = when_due(delivery, self._clock.now())
        if round_again:
            # Back early from a delay tier (tiers are coarse): round again for the rest.
            await self._hold_broker(delivery.again(delivery.not_before))
            return
        if wait_s > 0:
            await asyncio.sleep(wait_s)  # shorter than the shortest tier: wait here
        attempt: Attempt | None = None
        try:
            chain = self._chain(job_run)
            hold_until: datetime | None = None
            while True:
                attempt = Attempt(delivery, job_run, lambda: self._read(delivery))
                ending = await chain(attempt)
                if isinstance(ending, GiveUp):
                    ending = await self._give_up(attempt, ending.reason)
                if not isinstance(ending, Leased):
                    await self._act_on(ending, attempt)
                    return
                # Another attempt holds the job: wait here for its lease to end, keeping
                # the message (and its place at the head of the queue).
                if hold_until is None:
                    lease, _ = self._config.lease_of(job_run.timeout)
                    hold_until = self._clock.now() + HOLD_LEASES * lease
                still_leased = await wait_out_lease(
                    ending.job, hold_until, attempt.read, self._clock, self._sleep
                )
                if still_leased is not None:
                    await self._not_claimed(delivery, still_leased, self._clock.now())
                    return
        except Exception:
            log.exception("job %s: unexpected error in the runner", delivery.job_id)
            if attempt is None or attempt.job is None:
                await self._defer_after_error(delivery)
            elif attempt.outcome:  # recorded; a middleware failed as it let go
                await self._dispatcher.dispatch(attempt.outcome)
            # After a claim, the job keeps its lease; the lease sweeper republishes it
            # once the lease ends (see OutboxRelay).

    def _chain(self, job_run: JobRun) -> Step:
        """The job type's chain: the middleware that apply to it around `_step`, composed
        once per type (kept while the type's `JobRun` is, which the entry holds)."""
        known = self._chains.get(id(job_run))
        if known is not None:
            return known[1]
        chain = compose([m for m in self._middleware if m.applies_to(job_run)], job_run, self._step)
        if chain is self._step:
            return chain  # nothing composed (an unknown type's run among them)
        if len(self._chains) >= _CHAINS_MAX:
            self._chains.clear()
        self._chains[id(job_run)] = (job_run, chain)
        return chain

    async def _act_on(
        self, ending: Recorded | Defer | NotStartable | None, attempt: Attempt
    ) -> None:
        """What the chain ended in, once every middleware has let go of the delivery
        (the loop, `run`, takes a give-up and another attempt's lease)."""
        delivery = attempt.delivery
        match ending:
            case Recorded(messages):
                if messages:
                    await self._dispatcher.dispatch(messages)
            case Defer(message, wait):
                noted_at = self._clock.now()
                await self._hold_broker(message)
                if wait is not None and self._wait_notes is not None:
                    self._wait_notes.note(delivery.job_id, wait, noted_at)
            case NotStartable(current, now):
                await self._not_claimed(delivery, current, now)
            case None:
                pass
            case _:
                assert_never(ending)

    async def _step(self, attempt: Attempt) -> Ending:
        """Claim, attempt, record: the innermost link of every chain."""
        lease, renewed = self._config.lease_of(attempt.run.timeout)
        job = await self._claim(attempt, lease)
        if not isinstance(job, Job):
            return job
        token = ClaimToken.of(job)
        for hook in attempt.on_claimed:
            given = await hook(attempt)
            if given is not None:
                return await self._give_back(attempt, job, given)
        self._observer.claimed(job)
        outbox = await self._attempt(job, token, attempt, lease if renewed else None)
        return await self._recorded(attempt, job, outbox)

    async def _give_up(
        self, attempt: Attempt, reason: str
    ) -> Recorded | Leased | NotStartable | None:
        """Claim the job only to fail it, as an attempt that ran out of attempts is."""
        lease, _ = self._config.lease_of(attempt.run.timeout)
        job = await self._claim(attempt, lease)
        if not isinstance(job, Job):
            return job
        log.warning("job %s failed without running: %s", job.id, reason)
        self._observer.claimed(job)
        now = self._clock.now()
        dlq = self._config.dead_letter_queue
        return await self._recorded(
            attempt, job, (failed(job, reason, attempt.delivery, dlq, now),)
        )

    async def _give_back(self, attempt: Attempt, job: Job, given: GiveBack) -> Recorded | None:
        """A middleware turned away a job already claimed: give the claim and its
        attempt back and send the message round, as a denial before the claim would."""
        job.throttled(given.reason, given.run_after, given.now)
        recorded = await self._recorded(attempt, job, (given.message,))
        if recorded is not None and given.wait is not None and self._wait_notes is not None:
            # What turned it away, so that it says so while it waits (not "retry").
            self._wait_notes.note(job.id, given.wait, given.now)
        return recorded

    async def _recorded(
        self, attempt: Attempt, job: Job, outbox: Sequence[Outgoing]
    ) -> Recorded | None:
        """Record the attempt's outcome; its messages go once the middleware let go."""
        assert attempt.token is not None
        token = attempt.token
        if not await self._hold_store(lambda: self._record(job, token, outbox)):
            log.warning(
                "job %s attempt %d finished after another worker took it over; "
                "its outcome (%s) was discarded",
                job.id,
                token.attempt,
                job.status.value,
            )
            return None
        self._observer.recorded(job, token.started_at)
        attempt.outcome = outbox
        return Recorded(outbox)

    async def _defer_after_error(self, delivery: JobMessage) -> None:
        """An unexpected error before the claim: never let the delivery be acknowledged
        with the job left behind; send the message round again, later each time."""
        delay = timedelta(seconds=backoff(delivery.deferrals, 2.0, 60.0))
        await self._hold_broker(delivery.again(self._clock.now() + delay, deferred=True))

    async def _attempt(
        self, job: Job, token: ClaimToken, attempt: Attempt, renew: timedelta | None
    ) -> Sequence[Outgoing]:
        """Run the handler once and apply the outcome to `job`; return the messages to
        send. One watchdog keeps what the attempt holds while the handler runs: with
        `renew`, the claim's lease; what the middleware hold (`Attempt.kept`); and it
        stops the handler once the job is cancelled (``jobrail.worker.cancel_watch``)."""
        job_run = attempt.run
        progress = ProgressReporter(
            self._store, job.id, token, self._clock, self._config.progress_interval
        )
        ctx = JobContext(
            job_id=job.id,
            job_type=job.type,
            tenant_id=job.tenant_id,
            attempt=job.attempts,
            max_attempts=job.max_attempts,
            _store=self._store,
            fence=attempt.fence,
            _progress=progress,
            flow=job.flow,
        )
        timeout = job_run.timeout
        if job.cancel_requested:  # asked while its previous worker was dying
            job.stop_cancelled(self._clock.now())
            return ()
        holds: Sequence[Kept] = (*attempt.kept, WatchedCancel(self._store, job.id))
        if renew is not None:
            holds = (KeptClaim(self._store, job, token, renew, self._clock), *holds)
        try:
            # One timer keeps the holds and the job's timeout (TimeoutError past it).
            watchdog = Watchdog(holds, job.id, time_limit_s=timeout.total_seconds())
            result = await watchdog.run(lambda: job_run.handler(job.payload, ctx))
            stored = stored_result(result, self._config.max_result_bytes)
        except Exception as exc:  # every ending has its verdict, applied by `conclude`
            verdict = classify(exc, timeout)
            if verdict.unknown:
                log.exception("job %s (%s) raised an unexpected error", job.id, job.type)
            if verdict.next in (Next.RETRY, Next.FAIL):  # noted (FailureNotes) once recorded
                attempt.failure = failure_of(job, verdict.error, exc, self._clock.now())
            cancel_requested = verdict.runs_again and await self._hold_store(
                lambda: self._store.cancel_requested(job.id)
            )
            return conclude(
                job,
                verdict,
                now=self._clock.now(),
                policy=self._retry.for_type(job_run.retry_base_s, job_run.retry_cap_s),
                cancel_requested=cancel_requested,
                limits=job_run.limits,
                delivery=attempt.delivery,
                dead_letter_queue=self._config.dead_letter_queue,
            )
        finally:
            # The latest report lands before the outcome is recorded.
            await progress.close()
        job.succeed(stored, self._clock.now())
        return ()

    async def _not_claimed(self, delivery: JobMessage, current: Job | None, now: datetime) -> None:
        message = sent_on(delivery, current, now, self._config.dead_letter_queue)
        if message is not None:
            await self._hold_broker(message)

    async def _claim(self, attempt: Attempt, lease: timedelta) -> Job | Leased | NotStartable:
        """Claim the attempt's job (`Attempt.job`, `Attempt.token`), or say why not. The
        clock is read when the claim is made, not before the middleware's waits: a lease
        computed from an old "now" could already have ended."""
        delivery = attempt.delivery
        identity = JobIdentity(delivery.tenant_id, delivery.job_type)
        claim = await self._hold_store(
            lambda: self._store.claim(delivery.job_id, self._clock.now(), lease, identity)
        )
        if claim.job is None:
            now, current = self._clock.now(), claim.current
            if current is not None and leased_elsewhere(delivery, current, now):
                return Leased(current)
            if current is not None and delivery.names(current) and current.can_expire(now):
                current = await self._expire(current.id) or current
            return NotStartable(current, now)
        attempt.job, attempt.token = claim.job, ClaimToken.of(claim.job)
        return claim.job

    async def _expire(self, job_id: JobId) -> Job | None:
        """Expire the job if it may (else it ended or runs: a dead worker's job comes
        back through the lease sweep, and is expired then)."""
        expired = await self._hold_store(lambda: self._store.expire(job_id, self._clock.now()))
        if expired is not None:
            log.info("job %s expired: not started by its deadline", job_id)
        return expired

    def _record(self, job: Job, token: ClaimToken, outbox: Sequence[Outgoing]) -> Awaitable[bool]:
        """Record through the flows' recorder only what may end a flow's member."""
        store = self._store if job.flow is None else self._flows
        return store.record(job, token, outbox)

    async def _read(self, delivery: JobMessage) -> Job | None:
        return await self._hold_store(lambda: self._store.get(delivery.job_id))

    async def _hold_store(self, operation: Callable[[], Awaitable[T]]) -> T:
        return await hold(
            operation, StoreUnavailableError, "database", self._config.store_retry_max
        )

    async def _hold_broker(self, message: Outgoing) -> None:
        await hold(
            lambda: self._publisher.publish(message),
            BrokerUnavailableError,
            "broker",
            self._config.store_retry_max,
        )


async def hold(
    operation: Callable[[], Awaitable[T]],
    unavailable: type[Exception],
    what: str,
    max_delay: timedelta,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> T:
    """Run `operation` until the service it needs (the database, the broker) answers,
    holding the delivery: the platform's backoff up to `max_delay`, the first failure
    logged and every twentieth."""
    failures = 0
    while True:
        try:
            result = await operation()
        except unavailable as exc:
            if failures == 0 or (failures + 1) % 20 == 0:
                log.warning("%s unavailable (%s); holding the delivery and retrying", what, exc)
            await sleep(backoff(failures, FIRST_WAIT_S, max_delay.total_seconds()))
            failures += 1
        else:
            if failures:
                log.info("%s is back after %d failed tries", what, failures)
            return result
