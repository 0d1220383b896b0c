"""What a limit kind is: everything the backends need to know about one kind, in its class.

A kind (token bucket, sliding window, concurrency slots, lock) is a frozen dataclass
declared by job types and the API, and it carries, next to its parameters:

- its **Redis encoding**: the keys it uses (`redis_keys`) and how its parameters travel
  as script arguments (`admit_args`, `release_args`);
- its **Lua fragment** (`LUA`): the functions the admit, release, extend and holders
  scripts call for an item of this kind (see ``jobrail.limits.scripts``);
- its **in-memory evaluation**, the same arithmetic as the Lua, step for step, over a
  state of its own (`new_state`, `evaluate`, `release`, `extend`, `holders`, `prune`);
- its **TTLs**: `hold_ttl_s`, how long what it holds lasts unless renewed (a lock's TTL,
  a slot's lease; None for rate limits, which hold nothing while the job runs).

The scripts and the memory backend know kinds only through this interface: a new
kind is one class (a module of ``jobrail.limits.kinds``) and its place in ``KINDS``
and ``RateOrSlots`` (``jobrail.limits.model``).
"""

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, ClassVar, Generic, TypeVar

from jobrail.limits.keys import hash_tagged

S = TypeVar("S")


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
    until: float | None = None
    """A token bucket's token: the latest moment (the store's clock, ms) at which the
    work it pays for may start, so that the starts keep to the bucket (an allowed item:
    its start's deadline; a reservation: until when it may be used, `Acquire.prepaid`).
    None for other kinds."""
    holder: str | None = None
    """A lock denied because another holds it: that holder's token (``<job id>/...``
    when a job's admission took it). None for other kinds and when allowed."""

    @property
    def retry_after_s(self) -> float:
        return self.retry_after.total_seconds() if self.retry_after else 0.0


def nothing() -> None:
    return None


@dataclass(frozen=True, slots=True)
class Verdict:
    """One item's evaluation in memory: the decision, what to do if the whole admission
    is allowed (`take`, which may return a fencing token), and what to do if it is denied
    (`reserve`, for a kind that reserves on a denial)."""

    decision: Decision
    take: Callable[[], int | None] = nothing
    reserve: Callable[[], None] = nothing


@dataclass(frozen=True, slots=True)
class Context:
    """What an admission tells each of its items (as the Lua's `c` table does)."""

    holder: str
    now: float
    owner: str = ""
    take_over: bool = False
    reserve: bool = False

    def owned(self, who: str) -> bool:
        return bool(self.owner) and who.startswith(self.owner)


def wait_ms(value: float) -> timedelta:
    return timedelta(milliseconds=value) if value > 0 else timedelta(0)


def num(value: float) -> str:
    """A number as a script argument (exact: Lua reads it back to the same double)."""
    return repr(float(value))


def reservation(epoch: str, until: float | None) -> str:
    """A token bucket's reservation as `Acquire.prepaid` carries it: the bucket state it
    was made in and until when it may be used (``<epoch>@<until ms>``)."""
    return epoch if until is None else f"{epoch}@{num(until)}"


def reserved(prepaid: str | None) -> tuple[str, float | None]:
    """The epoch and the use-by time of a reservation (`reservation`); a bare epoch (a
    reservation from before use-by times) has none."""
    epoch, _, until = (prepaid or "").partition("@")
    try:
        return epoch, float(until) if until else None
    except ValueError:
        return epoch, None


class LimitKind(ABC, Generic[S]):
    """The interface every limit kind implements (see the module docstring).

    `S` is the kind's in-memory state: one per backend, for all limits of the kind."""

    __slots__ = ()

    kind: ClassVar[str]
    """A short code: the kind's name in keys (``{prefix}{kind}:{key}``) and in scripts."""
    LUA: ClassVar[str]
    """Lua that sets ``KINDS['<kind>']`` to a table of functions, run inside every script:

    - ``admit(c, k, p)`` -> ok, remaining, retry_ms, reserved, epoch, own, take, reserve,
      until, holder (`take` and `reserve` are functions or nil; `take` may return a
      fencing token; `until` is `Decision.until` and `holder` `Decision.holder`, nil for
      most kinds);
    - ``release(c, k, p)``; ``extend(c, k, ttl_ms)`` -> held (kinds that hold);
    - ``holders(c, k)`` -> a flat list of holder, until_ms (kinds that hold).

    `c` is the call's context (now, now_us, holder, owner, take, reserve, refund,
    owned(who)); `k` the item's keys (`redis_keys`); `p` its arguments."""
    reserves: ClassVar[bool] = False
    """Whether a denial reserves what was denied (`Acquire.prepaid` then names it)."""

    name: str
    key: str

    @property
    def hold_ttl_s(self) -> float | None:
        """How long what this limit holds while its job runs lasts unless renewed."""
        return None

    # -- Redis encoding --------------------------------------------------------------

    def redis_keys(self, prefix: str, key: str) -> list[str]:
        """The Redis keys of `key` (rendered), the first holding the limit's state."""
        return [f"{prefix}{self.kind}:{hash_tagged(key)}"]

    @abstractmethod
    def admit_args(self, prepaid: str | None) -> list[str]:
        """The admit script's four arguments for an item of this limit."""

    def release_args(self, epoch: str | None) -> list[str]:
        """The release script's three arguments for an item charged in `epoch`."""
        return ["", "", ""]

    # -- in memory -------------------------------------------------------------------

    @classmethod
    @abstractmethod
    def new_state(cls) -> S:
        """The empty state of this kind (as a Redis without any of its keys)."""

    @abstractmethod
    def evaluate(self, state: S, key: str, prepaid: str | None, c: Context) -> Verdict:
        """Whether acquiring `key` now is allowed, as the Lua ``admit`` decides."""

    @abstractmethod
    def release(self, state: S, key: str, holder: str, epoch: str | None, refund: bool) -> None:
        """Give back what `holder` holds (and, with `refund`, what it was charged)."""

    def extend(self, state: S, key: str, holder: str, now: float) -> bool:
        """Renew what `holder` holds; False if it no longer holds it."""
        return True

    def holders(self, state: S, key: str, now: float) -> list[dict[str, Any]]:
        return []

    @abstractmethod
    def reset(self, state: S, key: str) -> None:
        """Forget the state of `key` (a full bucket, an empty window, a free lock)."""

    @classmethod
    @abstractmethod
    def prune(cls, state: S, now: float) -> S:
        """`state` without what Redis would have expired by `now`."""
