"""What limits are, as data: declarations, the requests sent to a backend, decisions.

Everything here is plain Python; backends (memory, Redis) implement ``LimitsBackend``.
Each kind of limit is one class (``jobrail.limits.kinds``); ``KINDS`` lists them.
"""

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Protocol

from jobrail.limits.keys import (
    KeyTemplate,
    SlotPart,
    describe_slot,
    hash_tagged,
    slot_part,
)
from jobrail.limits.kind import Decision, LimitKind
from jobrail.limits.kinds.concurrency import Concurrency
from jobrail.limits.kinds.lock import Lock
from jobrail.limits.kinds.sliding_window import SlidingWindow
from jobrail.limits.kinds.token_bucket import TokenBucket

__all__ = [
    "KINDS",
    "Acquire",
    "Admission",
    "Concurrency",
    "Decision",
    "Grant",
    "JobLimits",
    "KeyTemplate",
    "Limit",
    "LimitKind",
    "LimitsBackend",
    "LimitsUnavailableError",
    "Lock",
    "RateOrSlots",
    "SlidingWindow",
    "SlotPart",
    "TokenBucket",
    "hash_tagged",
    "slot_part",
]

KINDS: tuple[type[LimitKind[Any]], ...] = (TokenBucket, SlidingWindow, Concurrency, Lock)
"""Every kind of limit the backends know (their scripts hold these kinds' Lua)."""

RateOrSlots = TokenBucket | SlidingWindow | Concurrency
"""What a job type declares in `limits=[...]` (its lock is declared apart)."""
Limit = RateOrSlots | Lock


class LimitsUnavailableError(Exception):
    """The limits store (Redis) cannot be reached. Nothing was acquired."""


# -- declarations ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class JobLimits:
    """Everything a job type declares: rate limits, concurrency slots and at most one lock."""

    limits: Sequence[RateOrSlots] = ()
    lock: Lock | None = None

    def __bool__(self) -> bool:
        return bool(self.limits) or self.lock is not None

    def all(self) -> list[Limit]:
        return [*self.limits, *([self.lock] if self.lock else [])]

    def keys(self, values: Mapping[str, object]) -> list[str]:
        """Every limit's key (the lock's last), filled from a payload and tenant."""
        return [KeyTemplate(limit.key).render(values) for limit in self.all()]

    def check_fields(self, job_type: str, available: Iterable[str]) -> None:
        """Refuse, at start-up, a key template naming a field the payload does not have."""
        known = set(available)
        for limit in self.all():
            for name in KeyTemplate(limit.key).fields:
                if name not in known:
                    raise ValueError(
                        f"job type {job_type!r}: limit {limit.name!r} key {limit.key!r} "
                        f"names field {name!r}, which its payload does not have "
                        f"(fields: {', '.join(sorted(known))})"
                    )

    def check_one_slot(self, job_type: str) -> None:
        """Refuse, at start-up, a job type whose keys a Redis Cluster could put on
        different slots: its admission is one script, which Redis runs only on keys of
        one slot (see ``slot_part``)."""
        templates = {limit.key for limit in self.all()}
        if len(templates) <= 1:
            return  # one key (a lock's fence key goes with it): always one slot
        parts = {template: slot_part(template) for template in templates}
        if None not in parts.values() and len(set(parts.values())) == 1:
            return
        described = "; ".join(
            f"{limit.name} {limit.key!r}: {describe_slot(parts[limit.key])}" for limit in self.all()
        )
        raise ValueError(
            f"job type {job_type!r}: its limit keys cannot share a Redis Cluster slot, and "
            f"its limits are acquired in one atomic step that needs them to ({described}). "
            "A key's slot follows the part after its first ':' (vendor:{tenant_id} and "
            "account:{tenant_id}:{account_id} share one, by tenant_id); give every key of "
            "the job the same part there, or use a single Redis (JOBRAIL_REDIS__CLUSTER=false)"
        )


# -- requests to a backend -----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Acquire:
    """One limit to acquire, with its key already rendered. A token bucket item may be
    `prepaid`: its token was reserved when an earlier admission was denied, in the
    bucket state named by its epoch (`Decision.epoch`), to be used by its `until`
    (``<epoch>@<until>``, ``jobrail.limits.kind.reservation``). The reservation is
    honoured only while the bucket is still in that state: after the store lost the
    bucket (a Redis restart without persistence, a reset) or the bucket refilled
    completely, the item competes for a token like any other, so a fresh bucket never
    pays twice. Brought after its `until`, it competes again too: its token's time has
    gone, and starting on it would bunch with the jobs admitted for later tokens."""

    limit: LimitKind[Any]
    key: str
    prepaid: str | None = None


@dataclass(frozen=True, slots=True)
class Grant:
    """What an admission holds, to extend and release later."""

    items: Sequence[Acquire]
    holder: str
    fence: int | None
    epochs: Sequence[str | None] = ()
    """Per item, the token bucket state it was charged in: a refund goes back only to
    that state (a bucket the store has since lost or refilled is not given a token)."""


@dataclass(frozen=True, slots=True)
class Admission:
    allowed: bool
    decisions: Sequence[Decision]
    grant: Grant | None
    now_ms: float | None = None
    """The store's clock when it decided (the clock of `Decision.until`)."""

    @property
    def start_within(self) -> timedelta | None:
        """How long after the decision the admitted work may start and keep to its token
        buckets (`Decision.until`); None when none of its items says."""
        untils = [d.until for d in self.decisions if d.allowed and d.until is not None]
        if not untils or self.now_ms is None:
            return None
        return timedelta(milliseconds=max(0.0, min(untils) - self.now_ms))

    @property
    def retry_after(self) -> timedelta:
        waits = [d.retry_after for d in self.decisions if not d.allowed and d.retry_after]
        return max(waits, default=timedelta(0))

    @property
    def denied_by(self) -> list[str]:
        return [d.name for d in self.decisions if not d.allowed]


class LimitsBackend(Protocol):
    async def admit(
        self,
        items: Sequence[Acquire],
        holder: str,
        *,
        reserve: bool = False,
        now_ms: float | None = None,
        owner: str = "",
        take_over: bool = False,
    ) -> Admission:
        """Acquire every item or none of them, in one atomic step (one round trip).
        With `reserve`, a denial reserves the next token of each token bucket that said
        no; the caller comes back when it is due, with those items prepaid.

        `owner` is a prefix of `holder` naming whom the admission is for (a job:
        ``<job id>/``). A lock or the slots held by holders with that prefix are
        reported as `Decision.own` when they deny; with `take_over` they are taken
        from those holders instead (the lock's fence grows, so their fenced writes are
        refused). Only a caller that knows none of them is alive may take over: the job
        runner does so after its database claim of the job (see ``jobrail.worker.runner``)."""
        ...

    async def release(
        self, grant: Grant, *, refund: bool = False, now_ms: float | None = None
    ) -> None:
        """Give back slots and the lock (and, with `refund`, the rate tokens) in one step."""
        ...

    async def extend(self, grant: Grant, *, now_ms: float | None = None) -> bool:
        """Renew the lock and slot leases; False if any of them was lost."""
        ...

    async def peek(self, item: Acquire, *, now_ms: float | None = None) -> Decision:
        """What acquiring `item` would decide now, without acquiring it."""
        ...

    async def peek_all(
        self, items: Sequence[Acquire], *, now_ms: float | None = None
    ) -> list[Decision]:
        """What acquiring each of `items` would decide now, acquiring nothing: `peek` for
        every item, in one step (one round trip)."""
        ...

    async def reset(self, item: Acquire) -> None:
        """Forget the state of a limit (a full bucket, an empty window, a free lock)."""
        ...

    async def holders(self, item: Acquire) -> list[dict[str, Any]]:
        """Who holds a lock or the slots of a concurrency limit, and until when (epoch
        ms); empty for rate limits."""
        ...

    async def fenced_write(
        self, resource: str, fence: int, value: str, *, now_ms: float | None = None
    ) -> bool:
        """Store `value` for `resource` unless a write with a newer fence came first."""
        ...

    async def close(self) -> None: ...
