"""Gating a job on its limits inside task execution (not in a Taskiq ``pre_execute``
hook, where an exception would leave the RabbitMQ message unacknowledged).

``JobGate.enter`` acquires everything the job type declares in one round trip. Denied:
the caller defers the message by ``retry_after`` plus jitter, spending no attempt.
Admitted: the ``Pass`` is kept by the attempt's watchdog (``jobrail.worker.watchdog``),
which renews the lock and the slot leases every third of their TTL and stops the
attempt if they were lost; it releases everything in one round trip at the end.

Holder tokens name the job they were made for (``job_owner``): a denial only by the
job's own earlier admissions (a dead attempt's lock or slot) is ``Deferred.own``, and
the limits middleware (``jobrail.worker.admission``), once the job is claimed, takes those
over (``take_over``).

Each admission is a span (``limits admit``) that says whether the job was admitted
or deferred, why, and for how long.

A token bucket that says no reserves its next token for the job, which comes back
when it is due with the reservation in its message (``Deferred.prepaid``): the bucket's
key, the epoch of the bucket state the token was reserved in, and until when it may be
used. The backend honours it only in that same state, so reservations made before Redis
lost its data are not honoured by the fresh bucket (see ``jobrail.limits.redis``), and
only until then, so that a job that comes back late does not start together with the
jobs admitted for later tokens.

A bucket keeps to its rate at the moments the jobs' handlers start, which is what a
vendor behind it sees: each admission says how long after it the job may start
(`Pass.start_within`, until its tokens' `Decision.until`; see
``jobrail.limits.kinds.token_bucket``). The job runner measures it from before the
request left and checks it just before the handler starts; a job later than that (its
claim waited on a busy database, say) competes for a token again instead of starting on
one whose time has gone (see ``jobrail.worker.admission``).

While Redis is unreachable, a limited job is deferred with exponential backoff on the
number of *consecutive* outage deferrals of that job (``outages``), not on all its
deferrals: a job that waited its turn at a rate limit many times does not, when
Redis goes away, wait as if it had waited for Redis all that time.
"""

import asyncio
import logging
import random
import string
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from math import isfinite

from opentelemetry import trace

from jobrail.jobs.domain import WaitsOn
from jobrail.jobs.retry import backoff
from jobrail.kernel.errors import TransientError
from jobrail.kernel.throttled_log import ThrottledLog
from jobrail.limits.counters import LimitCounters
from jobrail.limits.kind import reservation as prepaid_text
from jobrail.limits.kind import reserved
from jobrail.limits.model import (
    Acquire,
    Grant,
    JobLimits,
    LimitsBackend,
    LimitsUnavailableError,
)
from jobrail.worker.gating import Deferred, owner_job
from jobrail.worker.releases import ReleaseRetries
from jobrail.worker.watchdog import RENEWAL_MARGIN

log = logging.getLogger("jobrail.limits")

# How a deferred job names what it waits for (jobrail.jobs.domain.WaitsOn.kind).
_WAIT_KINDS = {
    "TokenBucket": "rate_limit",
    "SlidingWindow": "rate_limit",
    "Concurrency": "concurrency",
    "Lock": "lock",
}
_tracer = trace.get_tracer("jobrail.limits")
_unavailable = ThrottledLog(log)
_release_failed = ThrottledLog(log)


def holder_token(owner: str = "") -> str:
    """A random token naming who holds a lock or a slot (unique, not a secret), after
    `owner` (``<job id>/``: operators see whose it is, and a later admission of the same
    job can tell its own job's holders from others')."""
    return f"{owner}{random.getrandbits(96):024x}"


class LockLostError(TransientError):
    """The job's lock or slot lease ran out while it ran; the attempt was stopped."""


@dataclass(frozen=True, slots=True)
class GateConfig:
    contention_retry: timedelta = timedelta(milliseconds=250)
    jitter: float = 0.2
    unavailable_retry_max: timedelta = timedelta(seconds=30)
    unavailable_retry: timedelta = timedelta(milliseconds=500)
    """The first wait while the limits store is unreachable; it doubles with each
    consecutive outage deferral of the job, up to `unavailable_retry_max`."""


def reservation(key: str, epoch: str, until: float | None = None) -> str:
    """A reservation as it travels in a message's labels: ``<epoch>@<until>:<key>``. The
    epoch is hex digits only (``Decision.epoch``) and `until` a number, so the first
    colon ends them."""
    return f"{prepaid_text(epoch, until)}:{key}"


def reservations(labels: Sequence[str]) -> dict[str, str]:
    """Reserved token buckets' keys and their reservations (`Acquire.prepaid`), from a
    message's labels. Anything else (a label from before epochs, which named only the
    key) is no reservation: that job competes for its token again."""
    found = {}
    for label in labels:
        made, colon, key = label.partition(":")
        epoch, until = reserved(made)
        # A use-by time that is not a number is no reservation either.
        dated = "@" not in made or (until is not None and isfinite(until))
        if colon and key and epoch and all(c in string.hexdigits for c in epoch) and dated:
            found[key] = made
    return found


class Pass:
    """An admission: kept while the job runs (its lock and slot leases, renewed by the
    attempt's watchdog, ``jobrail.worker.watchdog``), released when the job ends."""

    def __init__(
        self,
        backend: LimitsBackend,
        grant: Grant,
        counters: LimitCounters,
        start_within: timedelta | None = None,
        releases: ReleaseRetries | None = None,
    ) -> None:
        self._backend = backend
        self._grant = grant
        self._counters = counters
        self._start_within = start_within
        self._releases = releases
        ttls = [ttl for item in grant.items if (ttl := item.limit.hold_ttl_s) is not None]
        self._ttl = min(ttls) if ttls else None
        self._confirmed = asyncio.get_running_loop().time()

    @property
    def fence(self) -> int | None:
        return self._grant.fence

    @property
    def start_within(self) -> timedelta | None:
        """How long after the admission was asked for the job must start to keep to its
        token buckets (None: it has none)."""
        return self._start_within

    @property
    def kept(self) -> "Pass | None":
        """Itself if it holds a lock or slots (which lapse unless renewed), else None."""
        return self if self._ttl is not None else None

    @property
    def renew_every_s(self) -> float:
        assert self._ttl is not None
        return self._ttl / 3

    def left_s(self) -> float:
        # Given up a margin before the shortest TTL since the last confirmed renewal
        # ends: from then on another job may take the lock.
        assert self._ttl is not None
        until = self._confirmed + self._ttl * (1 - RENEWAL_MARGIN)
        return until - asyncio.get_running_loop().time()

    async def renew(self) -> bool:
        """Renew the lock and slot leases (raises LimitsUnavailableError: unconfirmed)."""
        sent = asyncio.get_running_loop().time()
        held = await self._backend.extend(self._grant)
        if held:
            self._confirmed = sent
        return held

    def taken(self) -> Exception:
        self._counters.lock_lost += 1
        return LockLostError("the job's lock was lost while it ran")

    def lapsed(self, late_s: float) -> Exception:
        self._counters.lock_lost += 1
        return LockLostError("the job's lock was lost while it ran (no renewal was confirmed)")

    def started(self) -> None:
        # Counted when its job starts, not when the store said yes: a job too late for
        # its tokens is admitted again (jobrail.worker.admission), and counts once.
        self._counters.admitted += 1

    async def release(self, *, refund: bool = False) -> None:
        if self._ttl is None and not refund:
            return  # rate limits hold nothing while a job runs: nothing to give back
        try:
            await self._backend.release(self._grant, refund=refund)
        except LimitsUnavailableError as exc:
            if self._ttl is not None and self._releases is not None:
                # A lock or slots: released as soon as the store answers again.
                self._releases.add(self._grant, exc)
            else:
                # Tokens only: not refunded (a refund is not tried twice).
                _release_failed("could not refund limits (%s)", exc)


class JobGate:
    def __init__(
        self,
        backend: LimitsBackend,
        counters: LimitCounters,
        config: GateConfig,
        rng: Callable[[], float] = random.random,
        releases: ReleaseRetries | None = None,
    ) -> None:
        self._backend = backend
        self._counters = counters
        self._config = config
        self._rng = rng
        self.releases = releases if releases is not None else ReleaseRetries(backend)
        """The releases that failed, tried again in the background."""

    async def close(self) -> None:
        """Stop retrying failed releases (what is left expires on its own)."""
        await self.releases.close()

    async def enter(
        self,
        declared: JobLimits,
        keys: Sequence[str],
        deferrals: int = 0,
        prepaid: Sequence[str] = (),
        outages: int = 0,
        owner: str = "",
        take_over: bool = False,
    ) -> Pass | Deferred:
        """Admit the job (its limits' `keys`, as `declared.keys` fills them in), or say
        how long to wait. A token bucket that says no reserves its next token for the
        job, which comes back when the token is due and pays nothing then: waiting jobs
        are served in turn, without a stampede. `prepaid` is the job's reservations
        (`Deferred.prepaid` of its last deferral); `outages` how many times in a row it
        was deferred because the limits store was unreachable. `owner` (see `job_owner`)
        starts the holder token; with `take_over`, locks and slots its earlier
        admissions hold are taken from them (see `LimitsBackend.admit`)."""
        if not trace.get_current_span().is_recording():
            # The job's trace is not sampled (or nothing is exported): a child span
            # would not be either, and making one costs more than the admission's
            # own Python work.
            return await self._enter(declared, keys, prepaid, outages, owner, take_over)
        with _tracer.start_as_current_span(
            "limits admit", attributes={"limits.count": len(keys), "job.deferrals": deferrals}
        ) as span:
            verdict = await self._enter(declared, keys, prepaid, outages, owner, take_over)
            if isinstance(verdict, Deferred):
                span.set_attribute("limits.outcome", "deferred")
                span.set_attribute("limits.reason", verdict.reason)
                span.set_attribute("limits.delay_s", verdict.delay.total_seconds())
            else:
                span.set_attribute("limits.outcome", "admitted")
            return verdict

    async def _enter(
        self,
        declared: JobLimits,
        keys: Sequence[str],
        prepaid: Sequence[str],
        outages: int,
        owner: str = "",
        take_over: bool = False,
    ) -> Pass | Deferred:
        held = reservations(prepaid)
        items = [
            Acquire(limit, key, prepaid=held.get(key) if limit.reserves else None)
            for limit, key in zip(declared.all(), keys, strict=True)
        ]
        try:
            admission = await self._backend.admit(
                items,
                holder=holder_token(owner),
                reserve=True,
                owner=owner,
                take_over=take_over,
            )
        except LimitsUnavailableError as exc:
            self._counters.unavailable += 1
            # One line per interval for the process, not one per job: every job whose
            # keys live where the store cannot be reached meets the same error.
            _unavailable("limits store unavailable (%s); limited jobs wait and come back", exc)
            wait = backoff(
                outages,
                self._config.unavailable_retry.total_seconds(),
                self._config.unavailable_retry_max.total_seconds(),
            )
            return Deferred(
                self._jittered(wait),
                f"limits store unavailable: {exc}",
                unavailable=True,
                waits_on=(WaitsOn("limits_store", "limits store", ""),),
            )
        if admission.grant is not None:
            return Pass(
                self._backend,
                admission.grant,
                self._counters,
                admission.start_within,
                self.releases,
            )
        self._counters.deferred += 1
        contended = False
        waits = []
        # The tokens reserved now, and those reserved before that this state still
        # honoured (the admission failed on something else: they stay reserved).
        kept = [
            reservation(item.key, decision.epoch, decision.until)
            for item, decision in zip(items, admission.decisions, strict=True)
            if decision.epoch is not None
            and (
                decision.reserved
                or (
                    item.prepaid is not None
                    and reserved(item.prepaid) == (decision.epoch, decision.until)
                )
            )
        ]
        reservations_only = all(d.allowed or d.reserved for d in admission.decisions)
        for item, decision in zip(items, admission.decisions, strict=True):
            if decision.allowed:
                continue
            wait = decision.retry_after_s
            if item.limit.hold_ttl_s is not None:
                contended = True
                # A holder usually finishes long before its TTL: look again soon.
                wait = min(wait, self._config.contention_retry.total_seconds())
            waits.append(wait)
        if contended:
            self._counters.lock_contention += 1
        # A reserved token has a time of its own: no jitter, or it would be wasted.
        delay = max(waits)
        return Deferred(
            timedelta(seconds=delay) if reservations_only else self._jittered(delay),
            f"limited by {', '.join(admission.denied_by)}",
            prepaid=tuple(kept),
            own=all(d.allowed or d.own for d in admission.decisions),
            waits_on=tuple(
                WaitsOn(
                    _WAIT_KINDS.get(type(item.limit).__name__, "limit"),
                    item.limit.name,
                    item.key,
                    # Who holds a lock comes with its denial: no round trip more.
                    owner_job(decision.holder),
                )
                for item, decision in zip(items, admission.decisions, strict=True)
                if not decision.allowed
            ),
        )

    def _jittered(self, seconds: float) -> timedelta:
        return timedelta(seconds=seconds * (1 + self._config.jitter * self._rng()))
