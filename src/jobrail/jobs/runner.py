"""The worker side of every job: claim, run, record the outcome.

A delivery is acknowledged only after the runner returns. The runner returns once
the outcome is in the database (or the message was safely re-published); while
the database or the broker cannot be reached it waits and tries again, holding the
delivery, so a crash at any point means redelivery, never loss.

A claim is a lease on the job: until it ends no other worker may start the job. A
short job's lease is its timeout + grace; a long job's is `RunnerConfig.lease`,
renewed while it runs (`_LeaseRenewal`), so a dead worker's job is free again soon.
"""

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Protocol, TypeVar

from jobrail.jobs.context import JobCancelledError, JobContext
from jobrail.jobs.domain import DUE_TOLERANCE, Job
from jobrail.jobs.ports import (
    BrokerUnavailableError,
    ClaimToken,
    JobIdentity,
    JobStore,
    OutboxDispatcher,
    Publisher,
    StoreUnavailableError,
)
from jobrail.jobs.retry import RetryPolicy
from jobrail.kernel.clock import Clock
from jobrail.kernel.errors import PermanentError, ThrottledError, TransientError
from jobrail.kernel.ids import JobId
from jobrail.kernel.json_text import has_nul_escape
from jobrail.limits.gate import Deferred, JobGate, Pass
from jobrail.limits.model import JobLimits, LimitsUnavailableError
from jobrail.messaging.envelope import Envelope, dead_letter, job_envelope, with_task_id

log = logging.getLogger("jobrail.runner")

T = TypeVar("T")

# How late a job may come back and still use the token reserved for it.
RESERVATION_GRACE = timedelta(milliseconds=25)
# A message this close to its time waits in the worker instead of in a delay tier.
SHORT_WAIT = timedelta(milliseconds=30)

Handler = Callable[[Mapping[str, Any], JobContext], Awaitable[Mapping[str, Any] | None]]


@dataclass(frozen=True, slots=True)
class Delivery:
    """A job message as the worker received it."""

    job_id: JobId
    job_type: str
    queue: str
    tenant_id: str
    message_id: str
    deferrals: int = 0
    not_before: datetime | None = None
    prepaid: tuple[str, ...] = ()
    limit_keys: tuple[str, ...] | None = None
    trace_context: Mapping[str, str] = field(default_factory=dict)
    """The W3C trace context the message carried: sent on with every deferral."""
    outages: int = 0
    """Consecutive deferrals because the limits store was unreachable (its backoff)."""

    def again(
        self,
        not_before: datetime | None = None,
        *,
        deferred: bool = False,
        prepaid: Sequence[str] | None = None,
        outages: int | None = None,
    ) -> Envelope:
        """The same message, to publish anew (counting deferrals by the limits)."""
        return job_envelope(
            job_id=self.job_id,
            job_type=self.job_type,
            queue=self.queue,
            tenant_id=self.tenant_id,
            not_before=not_before,
            deferrals=self.deferrals + 1 if deferred else self.deferrals,
            prepaid=self.prepaid if prepaid is None else prepaid,
            limit_keys=self.limit_keys,
            trace_context=self.trace_context,
            outages=self.outages if outages is None else outages,
        )


@dataclass(frozen=True, slots=True)
class JobRun:
    """What the runner needs of a job type."""

    handler: Handler
    timeout: timedelta
    limits: JobLimits = field(default_factory=JobLimits)


class JobObserver(Protocol):
    """Told what happens to jobs in this worker (metrics, tracing). Must not raise."""

    def claimed(self, job: Job) -> None:
        """An attempt started: `job` is running, `started_at` set."""

    def recorded(self, job: Job, attempt_started_at: datetime) -> None:
        """An attempt's outcome was written: `job.status` is succeeded, failed,
        retrying or cancelled."""


class _NoObserver:
    def claimed(self, job: Job) -> None:
        return None

    def recorded(self, job: Job, attempt_started_at: datetime) -> None:
        return None


@dataclass(frozen=True, slots=True)
class RunnerConfig:
    dead_letter_queue: str
    lease_grace: timedelta
    store_retry_max: timedelta
    lease: timedelta | None = None
    """A job whose timeout + grace is longer claims this much, renewed every third of
    it while it runs, so a worker that dies mid-job frees it this soon rather than
    after its whole timeout. None: one lease of timeout + grace."""
    max_result_bytes: int = 64 * 1024
    """A handler's result larger than this (as UTF-8 JSON) fails the job permanently:
    the jobs table holds small results, not blobs (JOBRAIL_JOBS__MAX_RESULT_BYTES)."""


class LeaseLostError(TransientError):
    """The attempt's claim could not be renewed (another worker took the job over, or
    the database was away for a whole lease); the attempt was stopped."""


class JobRunner:
    def __init__(
        self,
        store: JobStore,
        dispatcher: OutboxDispatcher,
        publisher: Publisher,
        clock: Clock,
        retry: RetryPolicy,
        config: RunnerConfig,
        gate: JobGate | None = None,
        observer: JobObserver | None = None,
    ) -> None:
        self._gate = gate
        self._observer = observer or _NoObserver()
        self._store = store
        self._dispatcher = dispatcher
        self._publisher = publisher
        self._clock = clock
        self._retry = retry
        self._config = config

    async def run(self, delivery: Delivery, job_run: JobRun) -> None:
        """Run one delivery to its end. Returns once the outcome is recorded or the
        message is safely back on the bus; only then may the delivery be acknowledged."""
        if delivery.not_before is not None:
            early = (delivery.not_before - self._clock.now()).total_seconds()
            if early > SHORT_WAIT.total_seconds():
                # Back early from a delay tier (tiers are coarse): round again for the rest.
                await self._hold_broker(delivery.again(delivery.not_before))
                return
            if early > 0:
                await asyncio.sleep(early)  # shorter than the shortest tier: wait here
        claimed: list[Job] = []
        try:
            await self._run(delivery, job_run, claimed)
        except Exception:
            log.exception("job %s: unexpected error in the runner", delivery.job_id)
            if not claimed:
                await self._defer_after_error(delivery)
            # After a claim, the job keeps its lease; the lease sweeper republishes it
            # once the lease ends (see OutboxRelay).

    async def _run(self, delivery: Delivery, job_run: JobRun, claimed: list[Job]) -> None:
        hold: Pass | None = None
        if job_run.limits:
            hold = await self._admit(delivery, job_run.limits)
            if hold is None:
                return
        started = False
        try:
            lease = job_run.timeout + self._config.lease_grace
            renewed = self._config.lease is not None and lease > self._config.lease
            if renewed:
                assert self._config.lease is not None
                lease = self._config.lease
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
                await self._not_claimed(delivery, claim.current, self._clock.now())
                return
            started = True
            job = claim.job
            claimed.append(job)
            token = ClaimToken.of(job)
            self._observer.claimed(job)
            outbox = await self._attempt(job, job_run, hold, lease if renewed else None, delivery)
            recorded = await self._hold_store(lambda: self._store.record(job, token, outbox))
        finally:
            if hold is not None:
                await hold.release(refund=not started)
        if not recorded:
            log.warning(
                "job %s attempt %d finished after another worker took it over; "
                "its outcome (%s) was discarded",
                job.id,
                token.attempt,
                job.status.value,
            )
            return
        self._observer.recorded(job, token.started_at)
        if outbox:
            await self._dispatcher.dispatch(outbox)

    async def _defer_after_error(self, delivery: Delivery) -> None:
        """An unexpected error before the claim: never let the delivery be acknowledged
        with the job left behind; send the message round again, later each time."""
        delay = timedelta(seconds=min(60.0, 2.0 * (delivery.deferrals + 1)))
        await self._hold_broker(delivery.again(self._clock.now() + delay, deferred=True))

    async def _admit(self, delivery: Delivery, limits: JobLimits) -> Pass | None:
        """Acquire the job's limits and lock, or defer the message (no attempt spent)."""
        if self._gate is None:
            raise RuntimeError(f"job type {delivery.job_type} declares limits but no gate is set")
        now = self._clock.now()
        keys = delivery.limit_keys
        if keys is None or len(keys) != len(limits.all()):
            # An older message without its keys: read the job to fill them in.
            current = await self._hold_store(lambda: self._store.get(delivery.job_id))
            if current is None or not current.can_start(now):
                await self._not_claimed(delivery, current, now)
                return None
            keys = tuple(limits.keys({**current.payload, "tenant_id": current.tenant_id}))
        # A reserved token must be used on time: a job that comes back late competes
        # again, so that late jobs cannot bunch their calls together.
        on_time = delivery.not_before is not None and now <= delivery.not_before + RESERVATION_GRACE
        prepaid = delivery.prepaid if on_time else ()
        verdict = await self._gate.enter(
            limits, keys, delivery.deferrals, prepaid, outages=delivery.outages
        )
        if isinstance(verdict, Deferred):
            log.info(
                "job %s deferred %.3fs: %s",
                delivery.job_id,
                verdict.delay.total_seconds(),
                verdict.reason,
            )
            await self._hold_broker(
                # From the clock after Redis answered: never earlier than the reserved token.
                delivery.again(
                    self._clock.now() + verdict.delay,
                    deferred=True,
                    prepaid=verdict.prepaid,
                    # The outage backoff counts outage deferrals in a row, nothing else.
                    outages=delivery.outages + 1 if verdict.unavailable else 0,
                )
            )
            return None
        return verdict

    async def _attempt(
        self,
        job: Job,
        job_run: JobRun,
        hold: Pass | None,
        renew: timedelta | None,
        delivery: Delivery,
    ) -> Sequence[Envelope]:
        """Run the handler once and apply the outcome to `job`; return the messages to
        send. With `renew`, the claim's lease is renewed while the handler runs."""
        ctx = JobContext(
            job_id=job.id,
            job_type=job.type,
            tenant_id=job.tenant_id,
            attempt=job.attempts,
            max_attempts=job.max_attempts,
            _store=self._store,
            fence=hold.fence if hold else None,
        )
        timeout = job_run.timeout
        if job.cancel_requested:  # asked while its previous worker was dying
            job.stop_cancelled(self._clock.now())
            return ()
        try:
            async with asyncio.timeout(timeout.total_seconds()):

                def work() -> Awaitable[Any]:
                    if hold is None:
                        return job_run.handler(job.payload, ctx)
                    return hold.run(lambda: job_run.handler(job.payload, ctx))

                if renew is None:
                    result = await work()
                else:
                    result = await _LeaseRenewal(self._store, job, renew, self._clock).run(work)
            stored_result = _json_object(result, self._config.max_result_bytes)
        except JobCancelledError:
            job.stop_cancelled(self._clock.now())
            return ()
        except PermanentError as exc:
            return self._fail(job, f"permanent error: {_describe(exc)}", delivery)
        except ThrottledError as exc:
            now = self._clock.now()
            run_after = now + timedelta(seconds=exc.retry_after_s)
            job.throttled(_describe(exc), run_after, now)
            return (_again(job, run_after, job_run.limits),)
        except (
            TransientError,
            StoreUnavailableError,
            BrokerUnavailableError,
            LimitsUnavailableError,
        ) as exc:
            # Infrastructure the handler needed was away: as transient as it gets.
            return await self._retry_or_fail(
                job, _describe(exc), job.max_attempts, job_run, delivery
            )
        except TimeoutError:
            error = f"timed out after {timeout.total_seconds():g}s"
            return await self._retry_or_fail(job, error, job.max_attempts, job_run, delivery)
        except Exception as exc:
            log.exception("job %s (%s) raised an unexpected error", job.id, job.type)
            limit = min(job.max_attempts, self._retry.max_attempts_unknown)
            error = f"unexpected error: {_describe(exc)}"
            return await self._retry_or_fail(job, error, limit, job_run, delivery)
        job.succeed(stored_result, self._clock.now())
        return ()

    async def _retry_or_fail(
        self, job: Job, error: str, attempt_limit: int, job_run: JobRun, delivery: Delivery
    ) -> Sequence[Envelope]:
        if await self._hold_store(lambda: self._store.cancel_requested(job.id)):
            job.stop_cancelled(self._clock.now())
            return ()
        if job.attempts >= attempt_limit:
            return self._fail(job, f"{error} (gave up after {job.attempts} attempts)", delivery)
        now = self._clock.now()
        run_after = now + self._retry.delay(job.attempts)
        job.retry_later(error, run_after, now)
        return (_again(job, run_after, job_run.limits),)

    def _fail(self, job: Job, error: str, delivery: Delivery) -> Sequence[Envelope]:
        """Fail the job; its dead letter is the message that ran it, under its id, and
        names the failure (the job's finished_at) so that a redrive can tell it from
        the letters of earlier failures."""
        now = self._clock.now()
        job.fail(error, now)
        message = job_envelope(
            job_id=job.id,
            job_type=job.type,
            queue=job.queue,
            tenant_id=job.tenant_id,
            trace_context=job.trace_context,
        )
        return (
            dead_letter(
                body=with_task_id(message.body, delivery.message_id),
                reason=job.last_error or error,
                source_queue=job.queue,
                dead_letter_queue=self._config.dead_letter_queue,
                at=now,
                headers=message.headers,
                message_id=delivery.message_id,
                job_failed_at=job.finished_at,
            ),
        )

    async def _not_claimed(self, delivery: Delivery, current: Job | None, now: datetime) -> None:
        if current is None:
            log.warning(
                "message %s names job %s, which does not exist",
                delivery.message_id,
                delivery.job_id,
            )
            await self._refuse(delivery, f"job {delivery.job_id} does not exist", now)
            return
        if (current.tenant_id, current.type) != (delivery.tenant_id, delivery.job_type):
            # Someone published a message naming a job of another tenant or type: it is
            # never run on the message's word. The job row itself is left alone.
            log.warning(
                "message %s names job %s with another tenant or type than the job's; dead-lettered",
                delivery.message_id,
                delivery.job_id,
            )
            reason = f"the message's tenant or type does not match job {delivery.job_id}"
            await self._refuse(delivery, reason, now)
            return
        if current.status.is_terminal:
            log.info(
                "job %s is already %s; message %s acknowledged without running",
                current.id,
                current.status.value,
                delivery.message_id,
            )
            return
        # Not due yet, or still leased by a live attempt: come back when that ends.
        wake_at = (
            current.lease_until
            if current.lease_until and current.lease_until > now
            else current.run_after
        )
        if wake_at is None or wake_at <= now + DUE_TOLERANCE:
            wake_at = now + timedelta(seconds=1)
        log.debug(
            "job %s not claimable now (%s); deferred to %s",
            current.id,
            current.status.value,
            wake_at,
        )
        await self._hold_broker(delivery.again(not_before=wake_at))

    async def _refuse(self, delivery: Delivery, reason: str, now: datetime) -> None:
        """Dead-letter a message the runner will not run, with the reason."""
        await self._hold_broker(
            dead_letter(
                body=with_task_id(delivery.again().body, delivery.message_id),
                reason=reason,
                source_queue=delivery.queue,
                dead_letter_queue=self._config.dead_letter_queue,
                at=now,
                message_id=delivery.message_id,
            )
        )

    async def _hold_store(self, operation: Callable[[], Awaitable[T]]) -> T:
        return await _hold(
            operation, StoreUnavailableError, "database", self._config.store_retry_max
        )

    async def _hold_broker(self, envelope: Envelope) -> None:
        await _hold(
            lambda: self._publisher.publish(envelope),
            BrokerUnavailableError,
            "broker",
            self._config.store_retry_max,
        )


async def _hold(
    operation: Callable[[], Awaitable[T]],
    unavailable: type[Exception],
    what: str,
    max_delay: timedelta,
) -> T:
    """Run `operation` until the service it needs answers, backing off up to `max_delay`."""
    delay = 0.05
    failures = 0
    while True:
        try:
            result = await operation()
        except unavailable as exc:
            failures += 1
            if failures == 1 or failures % 20 == 0:
                log.warning("%s unavailable (%s); holding the delivery and retrying", what, exc)
            await asyncio.sleep(delay)
            delay = min(delay * 2, max_delay.total_seconds())
        else:
            if failures:
                log.info("%s is back after %d failed tries", what, failures)
            return result


def _again(job: Job, run_after: datetime, limits: JobLimits) -> Envelope:
    """The job's message for its next attempt."""
    keys = limits.keys({**job.payload, "tenant_id": job.tenant_id}) if limits else None
    return job_envelope(
        job_id=job.id,
        job_type=job.type,
        queue=job.queue,
        tenant_id=job.tenant_id,
        trace_context=job.trace_context,
        not_before=run_after,
        limit_keys=keys,
    )


def _json_object(result: Mapping[str, Any] | None, max_bytes: int) -> dict[str, Any] | None:
    if result is None:
        return None
    try:
        text = json.dumps(dict(result), allow_nan=False, ensure_ascii=False)
    except (TypeError, ValueError) as exc:
        raise PermanentError(f"the job's result is not JSON: {exc}") from exc
    size = len(text.encode())
    if size > max_bytes:
        raise PermanentError(
            f"the job's result is {size} bytes of JSON, more than the {max_bytes} a job "
            "may store (JOBRAIL_JOBS__MAX_RESULT_BYTES): store large output elsewhere "
            "and return a reference"
        )
    if has_nul_escape(text):
        raise PermanentError("the job's result holds a NUL character (U+0000)")
    value = json.loads(text)
    assert isinstance(value, dict)
    return value


def _describe(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class _LeaseRenewal:
    """Runs an attempt while renewing its claim's lease every third of it. The renewals
    are timers, not a task: most jobs end before the first one is due, and pay nothing.
    If a renewal finds the claim gone, or none succeeds for a whole lease, the attempt
    is stopped: another worker may be running the job by then."""

    def __init__(self, store: JobStore, job: Job, lease: timedelta, clock: Clock) -> None:
        self._store = store
        self._job = job
        self._token = ClaimToken.of(job)
        self._lease = lease
        self._clock = clock
        self._lost = False
        self._running = False
        self._renewals: set[asyncio.Task[None]] = set()

    async def run(self, work: Callable[[], Awaitable[T]]) -> T:
        """Await `work` in this task (no task of its own: it would cost every job); a
        lapsed claim cancels this task, and the cancellation becomes LeaseLostError."""
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None
        self._running = True
        self._confirmed = loop.time()
        self._timer = loop.call_later(self._lease.total_seconds() / 3, self._renew, task)
        try:
            return await work()
        except asyncio.CancelledError:
            if self._lost:
                task.uncancel()  # this cancellation was ours, and ends here
                raise LeaseLostError("the job's claim lapsed while it ran") from None
            raise
        finally:
            self._running = False
            self._timer.cancel()

    def _renew(self, task: "asyncio.Task[Any]") -> None:
        if self._running:
            renewal = asyncio.ensure_future(self._extend(task))
            self._renewals.add(renewal)
            renewal.add_done_callback(self._renewals.discard)

    async def _extend(self, task: "asyncio.Task[Any]") -> None:
        loop = asyncio.get_running_loop()
        lease = self._lease.total_seconds()
        try:
            held = await self._store.extend_lease(
                self._job.id, self._token, self._clock.now() + self._lease
            )
        except Exception as exc:  # noqa: BLE001 - unconfirmed, whatever the cause
            # Not renewed, not known lost: the claim holds until its lease runs out.
            held = loop.time() - self._confirmed < lease
            log.warning("job %s: cannot renew its claim (%s)", self._job.id, exc)
        else:
            if held:
                self._confirmed = loop.time()
        if not self._running:
            return
        if not held:
            log.warning("job %s: its claim lapsed while it ran; stopping the attempt", self._job.id)
            self._lost = True
            task.cancel()
            return
        self._timer = loop.call_later(lease / 3, self._renew, task)
