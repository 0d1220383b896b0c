"""What limits are, as data: declarations, the requests sent to a backend, decisions.

Everything here is plain Python; backends (memory, Redis) implement ``LimitsBackend``.
"""

import string
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Literal, Protocol

Kind = Literal["tb", "sw", "cs", "lk"]


class LimitsUnavailableError(Exception):
    """The limits store (Redis) cannot be reached. Nothing was acquired."""


# -- declarations ------------------------------------------------------------------


class KeyTemplate:
    """A key such as ``vendor:{tenant_id}`` filled from a job's payload and tenant."""

    def __init__(self, template: str) -> None:
        fields = []
        for _literal, name, spec, conversion in string.Formatter().parse(template):
            if name is None:
                continue
            if not name.isidentifier() or spec or conversion:
                raise ValueError(f"key template {template!r}: use plain {{field}} placeholders")
            fields.append(name)
        self.template = template
        self.fields = tuple(fields)

    def render(self, values: Mapping[str, object]) -> str:
        return self.template.format_map({name: values[name] for name in self.fields})

    def __repr__(self) -> str:
        return f"KeyTemplate({self.template!r})"


@dataclass(frozen=True, slots=True)
class TokenBucket:
    """``capacity`` tokens at most, refilled at ``per_second``; each acquire costs ``cost``.

    Implemented as GCRA: one timestamp per key, an exact ``retry_after``."""

    name: str
    key: str
    capacity: float
    per_second: float
    cost: float = 1.0

    def __post_init__(self) -> None:
        if self.capacity <= 0 or self.per_second <= 0:
            raise ValueError(f"limit {self.name}: capacity and per_second must be positive")
        if not 0 < self.cost <= self.capacity:
            raise ValueError(f"limit {self.name}: cost must be in (0, capacity]")

    kind: Kind = field(default="tb", init=False)


@dataclass(frozen=True, slots=True)
class SlidingWindow:
    """At most ``limit`` acquires in any window of ``window_s`` seconds (an exact log)."""

    name: str
    key: str
    limit: int
    window_s: float
    cost: int = 1

    def __post_init__(self) -> None:
        if self.limit < 1 or self.window_s <= 0:
            raise ValueError(f"limit {self.name}: limit >= 1 and window_s > 0 are needed")
        if not 1 <= self.cost <= self.limit:
            raise ValueError(f"limit {self.name}: cost must be in [1, limit]")

    kind: Kind = field(default="sw", init=False)


@dataclass(frozen=True, slots=True)
class Concurrency:
    """At most ``slots`` holders at once. A slot held by a dead worker frees itself when
    its lease ends; a live holder's lease is renewed while its job runs."""

    name: str
    key: str
    slots: int
    lease_s: float = 60.0

    def __post_init__(self) -> None:
        if self.slots < 1 or self.lease_s <= 0:
            raise ValueError(f"limit {self.name}: slots >= 1 and lease_s > 0 are needed")

    kind: Kind = field(default="cs", init=False)


@dataclass(frozen=True, slots=True)
class Lock:
    """One holder at a time, with a random token, a TTL renewed while the job runs, and a
    fencing token that only grows (pass it to writes so a stale holder's write is refused),
    also across a restart of the store that lost its data (see ``jobrail.limits.redis``)."""

    key: str
    ttl_s: float = 30.0
    name: str = "lock"

    def __post_init__(self) -> None:
        if self.ttl_s <= 0:
            raise ValueError("lock ttl_s must be positive")

    kind: Kind = field(default="lk", init=False)


Limit = TokenBucket | SlidingWindow | Concurrency | Lock


@dataclass(frozen=True, slots=True)
class JobLimits:
    """Everything a job type declares: rate limits, concurrency slots and at most one lock."""

    limits: Sequence[TokenBucket | SlidingWindow | Concurrency] = ()
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
            f"{limit.name} {limit.key!r}: {_describe_slot(parts[limit.key])}"
            for limit in self.all()
        )
        raise ValueError(
            f"job type {job_type!r}: its limit keys cannot share a Redis Cluster slot, and "
            f"its limits are acquired in one atomic step that needs them to ({described}). "
            "A key's slot follows the part after its first ':' (vendor:{tenant_id} and "
            "account:{tenant_id}:{account_id} share one, by tenant_id); give every key of "
            "the job the same part there, or use a single Redis (JOBRAIL_REDIS__CLUSTER=false)"
        )


# -- Redis Cluster slots ---------------------------------------------------------------
#
# Redis Cluster runs a script only on keys of one hash slot, and a job's limits are
# acquired by one script. A key's slot is decided by its *owner*, the part after its
# first ':' up to the next one: `vendor:acme`, `account:acme:a7` and
# `api:enqueue:ip:10.0.0.1` have the owners `acme`, `acme` and `enqueue`. A key
# without ':' is its own owner (`email-provider`). The Redis backend names a key with
# its owner in braces, a hash tag (`jobrail:tb:vendor:{acme}`), in a single Redis as
# well, so that a key has one name whatever the deployment.
#
# The rule reads the rendered key, not its template, so every key (a job's, the API's,
# the scheduler's, one an operator types) gets the same name wherever it comes from; and
# a key two job types share is one string, so one Redis key, for both. At start-up,
# `slot_part` tells from a template what will decide its keys' slot, and a job type
# whose keys would not agree is refused (only on a cluster: see JobLimits.check_one_slot).
#
# Why the owner and not, say, the first placeholder: jobrail's keys are already written
# `what:{whose}`, and a rule on the rendered string needs no template to apply. Keys
# scoped by tenant (`vendor:{tenant_id}`) therefore spread over the cluster by tenant,
# each tenant's keys on one node; a key shared across tenants (`email-provider`) and a
# per-entity key can only be acquired together if the entity key names the same owner
# (`receipt:email-provider:{event_id}`).


def hash_tagged(key: str) -> str:
    """`key` with its owner in braces: the name the Redis backend stores it under.

    Braces and '%' in the parts before the hash tag's end are percent-escaped, so that
    the braces jobrail adds are the first ones Redis sees (a value such as ``a}b`` could
    otherwise end the tag early), and an empty owner is written ``%`` (``{}`` is no hash
    tag to Redis). Distinct keys keep distinct names: the escaping can be undone."""
    head, colon, rest = key.partition(":")
    if not colon:
        return "{" + _tag(key) + "}"
    owner, colon, tail = rest.partition(":")
    return f"{_escape(head)}:{{{_tag(owner)}}}{colon}{tail}"


def _escape(text: str) -> str:
    return text.replace("%", "%25").replace("{", "%7B").replace("}", "%7D")


def _tag(owner: str) -> str:
    return _escape(owner) or "%"


SlotPart = tuple[Literal["field", "text"], str]


def slot_part(template: str) -> SlotPart | None:
    """What decides the slot of the keys `template` renders: one field's value
    (``("field", "tenant_id")`` for ``vendor:{tenant_id}``), a fixed text (``("text",
    "email-provider")`` for ``email-provider`` or ``receipt:email-provider:{event_id}``),
    or None when it depends on the values' contents (a value before the first ':', or
    one that is only a piece of the owner, as in ``vendor:eu-{tenant_id}``).

    A field works as the owner when it fills the whole part after the first ':'; a
    value with a ':' of its own then still gives every such key the same owner (the
    value up to its first ':')."""
    tokens: list[tuple[bool, str]] = []  # (is a field, literal text or field name)
    for literal, name, _spec, _conversion in string.Formatter().parse(template):
        if literal:
            if tokens and not tokens[-1][0]:
                tokens[-1] = (False, tokens[-1][1] + literal)
            else:
                tokens.append((False, literal))
        if name is not None:
            tokens.append((True, name))
    for i, (is_field, text) in enumerate(tokens):
        if is_field:
            return None  # a value before the first ':' may hold a ':' itself
        if ":" in text:
            after, rest = text.split(":", 1)[1], tokens[i + 1 :]
            break
    else:
        return ("text", "".join(text for _, text in tokens))
    if after:
        if ":" in after:
            return ("text", after.split(":", 1)[0])
        return None if rest else ("text", after)
    if not rest:
        return ("text", "")
    name = rest[0][1]  # literals are merged: what follows a literal is a field
    if len(rest) == 1 or (not rest[1][0] and rest[1][1].startswith(":")):
        return ("field", name)
    return None


def _describe_slot(part: SlotPart | None) -> str:
    if part is None:
        return "its slot depends on the values (no single field follows its first ':')"
    kind, text = part
    return f"slot by field {text!r}" if kind == "field" else f"slot by the text {text!r}"


# -- requests to a backend -----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Acquire:
    """One limit to acquire, with its key already rendered. A token bucket item may be
    `prepaid`: its token was reserved when an earlier admission was denied, in the
    bucket state named by this epoch (`Decision.epoch`). The reservation is honoured
    only while the bucket is still in that state: after the store lost the bucket (a
    Redis restart without persistence, a reset) or the bucket refilled completely, the
    item competes for a token like any other, so a fresh bucket never pays twice."""

    limit: Limit
    key: str
    prepaid: str | None = None


@dataclass(frozen=True, slots=True)
class Decision:
    name: str
    allowed: bool
    remaining: float
    retry_after: timedelta | None
    reserved: bool = False
    """Denied, but the next token was reserved for the caller: due at `retry_after`."""
    epoch: str | None = None
    """A token bucket's state: an id (16 hex digits) made whenever the bucket starts from
    full (first use, refilled completely, lost by the store). Passed back as
    `Acquire.prepaid` with a reservation."""
    own: bool = False
    """A lock or slot denied only because holders of the admission's own `owner` hold it
    (an earlier admission for the same job): an admission with `take_over` would get it."""

    @property
    def retry_after_s(self) -> float:
        return self.retry_after.total_seconds() if self.retry_after else 0.0


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
        runner does so after its database claim of the job (see ``jobrail.jobs.runner``)."""
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
