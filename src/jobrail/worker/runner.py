"""The worker side of every job: admit → claim → attempt → record.

The runner is the orchestrator: the attempt's middleware (``jobrail.worker.middleware``,
in the order the composition root gives them; the job's limits and lock are one,
``jobrail.worker.admission``) let the delivery in before the claim and say what the
attempt holds after it; the parts beside it classify the outcome and decide the retry
and apply it to the job (``jobrail.worker.outcomes``), keep the attempt's holds
(``jobrail.worker.watchdog``), route messages that cannot run now
(``jobrail.worker.rerouting``), take over a dead worker's job (``jobrail.worker.takeover``)
and wait out outages (``jobrail.worker.waiting``).

A delivery is acknowledged only after the runner returns. The runner returns once
the outcome is in the database (or the message was safely re-published); while
the database or the broker cannot be reached it waits and tries again, holding the
delivery, so a crash at any point means redelivery, never loss.

A claim is a lease on the job: until it ends no other worker may start the job.
Every claim is short: `RunnerConfig.lease` (a few seconds), renewed every third of
it while the job runs (``jobrail.worker.watchdog``), or the job's timeout + grace when that is
shorter. A job that ends before its first renewal (most do) costs one claim and one
record, nothing more; a job that runs long keeps its claim for as long as its worker
renews it, and stops itself shortly before its lease would end if no renewal is
confirmed in time, so that it never runs beside the worker that takes it over. (The
renewals run on the worker's event loop: a handler that blocks the loop for longer than
a lease cannot renew, may be taken over, and stops at its next await. Blocking work
belongs in a thread, or needs a longer `JOBRAIL_JOBS__LEASE_S`.)

Clocks. Leases are written and compared with the clock of the worker that claims or
renews (`Clock`), not the database's: workers must agree on the time to better than
RENEWAL_MARGIN of a lease (1 s of the default 6 s), which NTP gives by far. A worker
whose clock runs that far ahead may claim a job whose holder is still running it. (The
lock's fence comes from Redis's clock, so fenced writes stay safe.) Taking the
database's now() in the claim and the renewal would lift the assumption, at the price
of a store that no longer runs on the clock it is given.

Taking over a dead worker's job: a claim that fails on a live lease holds the delivery
until that lease ends (``jobrail.worker.takeover``), so a dead worker's job starts again
about one lease after its death, whatever the backlog behind it, and takes over its
lock and slots too.
"""

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime, timedelta
from typing import Any, TypeVar

from jobrail.jobs.domain import Job
from jobrail.jobs.messages import JobMessage, Outgoing
from jobrail.jobs.ports import ClaimToken
from jobrail.jobs.publishing import OutboxDispatcher, Publisher
from jobrail.jobs.retry import RetryPolicy, backoff
from jobrail.kernel.clock import Clock
from jobrail.kernel.errors import BrokerUnavailableError, StoreUnavailableError
from jobrail.worker.attempt import Attempt, JobObserver, JobRun, NoObserver, RunnerConfig
from jobrail.worker.context import JobContext
from jobrail.worker.job_store import JobIdentity, JobStore
from jobrail.worker.middleware import AttemptMiddleware, Defer, GiveBack, GiveUp, NotStartable
from jobrail.worker.outcomes import Verdict, classify, conclude, failed, stored_result
from jobrail.worker.progress import ProgressReporter
from jobrail.worker.rerouting import leased_elsewhere, sent_on, when_due
from jobrail.worker.takeover import HOLD_LEASES, wait_out_lease
from jobrail.worker.wait_notes import WaitNotes
from jobrail.worker.waiting import hold
from jobrail.worker.watchdog import Kept, KeptClaim, Watchdog

__all__ = ["JobObserver", "JobRun", "JobRunner", "RunnerConfig"]

log = logging.getLogger("jobrail.runner")

T = TypeVar("T")


class JobRunner:
    def __init__(
        self,
        store: JobStore,
        dispatcher: OutboxDispatcher,
        publisher: Publisher,
        clock: Clock,
        retry: RetryPolicy,
        config: RunnerConfig,
        middleware: Sequence[AttemptMiddleware[Any]] = (),
        observer: JobObserver | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        wait_notes: WaitNotes | None = None,
    ) -> None:
        """`middleware`: the attempt's chain, in order (see ``jobrail.worker.middleware``);
        `wait_notes`: where a deferred job notes what it waits for."""
        self._sleep = sleep
        self._wait_notes = wait_notes
        self._middleware = tuple(middleware)
        self._observer = observer or NoObserver()
        self._store = store
        self._dispatcher = dispatcher
        self._publisher = publisher
        self._clock = clock
        self._retry = retry
        self._config = config

    async def run(self, delivery: JobMessage, job_run: JobRun) -> None:
        """Run one delivery to its end. Returns once the outcome is recorded or the
        message is safely back on the bus; only then may the delivery be acknowledged."""
        round_again, wait_s = when_due(delivery, self._clock.now())
        if round_again:
            # Back early from a delay tier (tiers are coarse): round again for the rest.
            await self._hold_broker(delivery.again(delivery.not_before))
            return
        if wait_s > 0:
            await asyncio.sleep(wait_s)  # shorter than the shortest tier: wait here
        claimed: list[Job] = []
        try:
            hold_until: datetime | None = None
            while (leased := await self._run(delivery, job_run, claimed)) is not None:
                # Another attempt holds the job: wait here for its lease to end, keeping
                # the message (and its place at the head of the queue).
                if hold_until is None:
                    lease, _ = self._config.lease_of(job_run.timeout)
                    hold_until = self._clock.now() + HOLD_LEASES * lease
                still_leased = await wait_out_lease(
                    leased,
                    hold_until,
                    lambda: self._hold_store(lambda: self._store.get(delivery.job_id)),
                    self._clock,
                    self._sleep,
                )
                if still_leased is not None:
                    await self._not_claimed(delivery, still_leased, self._clock.now())
                    return
        except Exception:
            log.exception("job %s: unexpected error in the runner", delivery.job_id)
            if not claimed:
                await self._defer_after_error(delivery)
            # After a claim, the job keeps its lease; the lease sweeper republishes it
            # once the lease ends (see OutboxRelay).

    async def _run(self, delivery: JobMessage, job_run: JobRun, claimed: list[Job]) -> Job | None:
        """Admit, claim, attempt, record, through the middleware that apply to the job
        (``jobrail.worker.middleware``). Returns the job, as read, when another attempt
        holds its lease (the middleware having given back what they took); else None."""
        attempt = Attempt(
            delivery, job_run, lambda: self._hold_store(lambda: self._store.get(delivery.job_id))
        )
        entered: list[tuple[AttemptMiddleware[Any], Any]] = []
        give_up: GiveUp | None = None
        try:
            for middleware in self._middleware:
                if not middleware.applies_to(job_run):
                    continue
                state = await middleware.before_claim(attempt)
                if isinstance(state, Defer):
                    noted_at = self._clock.now()
                    await self._hold_broker(state.message)
                    if state.wait is not None and self._wait_notes is not None:
                        self._wait_notes.note(delivery.job_id, state.wait, noted_at)
                    return None
                if isinstance(state, NotStartable):
                    await self._not_claimed(delivery, state.current, state.now)
                    return None
                if isinstance(state, GiveUp):
                    give_up = state
                    break
                entered.append((middleware, state))
            if job_run.limits and not entered and give_up is None:
                # Fail closed: a limited job never runs unlimited because the chain was
                # built without the middleware that enforces its limits.
                raise RuntimeError(
                    f"job {delivery.job_id} ({delivery.job_type}) declares limits, but no "
                    "attempt middleware enforces them"
                )
            lease, renewed = self._config.lease_of(job_run.timeout)
            # The clock is read when the claim is made, not before the waits above:
            # a lease computed from an old "now" could already have ended.
            claim = await self._hold_store(
                lambda: self._store.claim(
                    delivery.job_id,
                    self._clock.now(),
                    lease,
                    JobIdentity(delivery.tenant_id, delivery.job_type),
                )
            )
            if claim.job is None:
                now = self._clock.now()
                if leased_elsewhere(delivery, claim.current, now):
                    return claim.current
                await self._not_claimed(delivery, claim.current, now)
                return None
            job = attempt.job = claim.job
            claimed.append(job)
            token = attempt.token = ClaimToken.of(job)
            if give_up is not None:
                # Claimed only to fail it, as an attempt that ran out of attempts is.
                log.warning("job %s failed without running: %s", job.id, give_up.reason)
                self._observer.claimed(job)
                now = self._clock.now()
                letter = (
                    failed(job, give_up.reason, delivery, self._config.dead_letter_queue, now),
                )
                if await self._hold_store(lambda: self._store.record(job, token, letter)):
                    self._observer.recorded(job, token.started_at)
                    await self._dispatcher.dispatch(letter)
                return None
            for i, (middleware, state) in enumerate(entered):
                after = await middleware.after_claim(attempt, state)
                if isinstance(after, GiveBack):
                    await self._give_back(job, token, after)
                    return None
                entered[i] = (middleware, after)
            self._observer.claimed(job)
            outbox = await self._attempt(job, token, attempt, lease if renewed else None)
            recorded = await self._hold_store(lambda: self._store.record(job, token, outbox))
        finally:
            if entered:
                await self._leave(attempt, entered)
        if not recorded:
            log.warning(
                "job %s attempt %d finished after another worker took it over; "
                "its outcome (%s) was discarded",
                job.id,
                token.attempt,
                job.status.value,
            )
            return None
        self._observer.recorded(job, token.started_at)
        if outbox:
            await self._dispatcher.dispatch(outbox)
        return None

    async def _leave(
        self, attempt: Attempt, entered: list[tuple[AttemptMiddleware[Any], Any]]
    ) -> None:
        """The middleware that let the attempt in, told it is over, the last first."""
        for middleware, state in reversed(entered):
            try:
                await middleware.after_attempt(attempt, state)
            except Exception:
                log.exception(
                    "job %s: %s failed after the attempt",
                    attempt.delivery.job_id,
                    type(middleware).__name__,
                )

    async def _give_back(self, job: Job, token: ClaimToken, given: GiveBack) -> None:
        """A middleware turned away a job already claimed: give the claim and its
        attempt back and send the message round, as a denial before the claim would."""
        job.throttled(given.reason, given.run_after, given.now)
        if await self._hold_store(lambda: self._store.record(job, token, (given.message,))):
            await self._dispatcher.dispatch((given.message,))

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
        `renew`, the claim's lease; what the middleware hold (`Attempt.kept`)."""
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
        holds: Sequence[Kept] = attempt.kept
        if renew is not None:
            holds = (KeptClaim(self._store, job, token, renew, self._clock), *holds)
        try:
            # One timer keeps the holds and the job's timeout (TimeoutError past it).
            watchdog = Watchdog(holds, job.id, time_limit_s=timeout.total_seconds())
            result = await watchdog.run(lambda: job_run.handler(job.payload, ctx))
            stored = stored_result(result, self._config.max_result_bytes)
        except Exception as exc:  # every ending has its verdict (jobrail.worker.outcomes)
            verdict = classify(exc, timeout)
            if verdict.unknown:
                log.exception("job %s (%s) raised an unexpected error", job.id, job.type)
            return await self._conclude(job, verdict, job_run, attempt.delivery)
        finally:
            # The latest report lands before the outcome is recorded.
            await progress.close()
        job.succeed(stored, self._clock.now())
        return ()

    async def _conclude(
        self, job: Job, verdict: Verdict, job_run: JobRun, delivery: JobMessage
    ) -> Sequence[Outgoing]:
        """Apply an attempt's failure to the job (``jobrail.worker.outcomes.conclude``);
        return the messages to send."""
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
            delivery=delivery,
            dead_letter_queue=self._config.dead_letter_queue,
        )

    async def _not_claimed(self, delivery: JobMessage, current: Job | None, now: datetime) -> None:
        message = sent_on(delivery, current, now, self._config.dead_letter_queue)
        if message is not None:
            await self._hold_broker(message)

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
