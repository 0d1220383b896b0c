"""How long to wait before trying again: one backoff for the whole platform.

`backoff(n, base, cap)` is ``min(cap, base * 2**n)``: the job retries (with full
jitter, `RetryPolicy`), the runner's waits for a database or broker that is away, the
re-sends after an unexpected error, and the limits' waits for a Redis that is away all
use it, each with its own base and cap.
"""

import random
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import timedelta


def backoff(n: int, base_s: float, cap_s: float) -> float:
    """The wait before try number `n` (from 0): ``base_s * 2**n``, at most `cap_s`."""
    return min(cap_s, base_s * 2.0 ** min(max(n, 0), 62))


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Exponential backoff with full jitter: ``backoff(n, base, cap) * random()``.

    ``n`` counts retries from 0, so the first retry waits at most ``base``. With
    ``jitter=False`` the delay is the upper bound itself (useful to observe backoff).
    A job type may set its own base and cap (`for_type`).

    An unexpected error (neither transient nor permanent) gets at most
    ``max_attempts_unknown`` attempts, unless its job type declares a ``max_attempts``
    of its own (`own_max_attempts`): a type that asks for four attempts gets four for
    every error that may be retried (`attempts_for`).
    """

    base_s: float
    cap_s: float
    jitter: bool = True
    max_attempts_unknown: int = 3
    own_max_attempts: frozenset[str] = frozenset()
    """The job types that declare their own max_attempts."""
    rng: Callable[[], float] = field(default=random.random, compare=False)

    def attempts_for(self, job_type: str | None, max_attempts: int, *, unknown: bool) -> int:
        """How many attempts in all a job of `job_type` (None: one that declares no
        max_attempts) whose limit is `max_attempts` may make for a failure, an
        unexpected error if `unknown`."""
        if unknown and job_type not in self.own_max_attempts:
            return min(max_attempts, self.max_attempts_unknown)
        return max_attempts

    def delay(self, attempts_made: int) -> timedelta:
        bound = backoff(attempts_made - 1, self.base_s, self.cap_s)
        factor = self.rng() if self.jitter else 1.0
        return timedelta(seconds=bound * factor)

    def for_type(self, base_s: float | None, cap_s: float | None) -> "RetryPolicy":
        """This policy with a job type's own base and cap, where it sets them."""
        if base_s is None and cap_s is None:
            return self
        return replace(
            self,
            base_s=self.base_s if base_s is None else base_s,
            cap_s=self.cap_s if cap_s is None else cap_s,
        )
