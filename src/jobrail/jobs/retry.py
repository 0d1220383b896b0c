import random
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Exponential backoff with full jitter: ``min(cap, base * 2**n) * random()``.

    ``n`` counts retries from 0, so the first retry waits at most ``base``. With
    ``jitter=False`` the delay is the upper bound itself (useful to observe backoff).
    """

    base_s: float
    cap_s: float
    jitter: bool = True
    max_attempts_unknown: int = 3
    rng: Callable[[], float] = field(default=random.random, compare=False)

    def delay(self, attempts_made: int) -> timedelta:
        retry_number = max(attempts_made - 1, 0)
        bound = min(self.cap_s, self.base_s * 2.0 ** min(retry_number, 62))
        factor = self.rng() if self.jitter else 1.0
        return timedelta(seconds=bound * factor)
