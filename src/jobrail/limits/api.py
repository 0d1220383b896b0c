"""API rate limits: every rule of a route group checked in one round trip.

``enqueue`` and ``read`` limit authenticated traffic, per tenant and globally.
``auth_failures`` limits failed authentications per client address: a request whose
key the process does not know yet is charged *before* its key is looked up, and the
charge is refunded when the key turns out to be live, so a flood of wrong keys is
throttled before it becomes a flood of database lookups, while a client with good
keys never pays.
"""

import logging
import math
from dataclasses import dataclass

from jobrail.kernel.ids import new_id
from jobrail.limits.counters import LimitCounters
from jobrail.limits.model import (
    Acquire,
    Admission,
    Grant,
    LimitsBackend,
    LimitsUnavailableError,
    SlidingWindow,
    TokenBucket,
)
from jobrail.settings import ApiLimitRule, ApiLimitsSettings

log = logging.getLogger("jobrail.limits")

GROUPS = ("enqueue", "read", "auth_failures")


@dataclass(frozen=True, slots=True)
class ApiDecision:
    allowed: bool
    limit: int
    remaining: int
    reset_s: int
    retry_after_s: int
    rule: str

    def headers(self) -> dict[str, str]:
        headers = {
            "RateLimit-Limit": str(self.limit),
            "RateLimit-Remaining": str(self.remaining),
            "RateLimit-Reset": str(self.reset_s),
        }
        if not self.allowed:
            headers["Retry-After"] = str(self.retry_after_s)
        return headers


@dataclass(frozen=True, slots=True)
class AuthAttempt:
    """One failed authentication charged in advance; refunded if the key is live."""

    decision: ApiDecision
    grant: Grant | None


def _limit(group: str, rule: ApiLimitRule) -> SlidingWindow | TokenBucket:
    name = f"{group}:{rule.scope}"
    if rule.algorithm == "sliding_window":
        return SlidingWindow(name, key="", limit=rule.limit, window_s=rule.window_s)
    return TokenBucket(name, key="", capacity=rule.limit, per_second=rule.limit / rule.window_s)


class ApiRateLimiter:
    def __init__(
        self, backend: LimitsBackend, settings: ApiLimitsSettings, counters: LimitCounters
    ) -> None:
        self._backend = backend
        self._settings = settings
        self._counters = counters
        self._rules = {
            group: [(rule, _limit(group, rule)) for rule in getattr(settings, group)]
            for group in GROUPS
        }

    @property
    def enabled(self) -> bool:
        return self._settings.enabled

    def count_unavailable(self) -> None:
        self._counters.api_unavailable += 1

    def fails_open(self, group: str) -> bool:
        return group == "read" and self._settings.read_fail_open

    async def check(self, group: str, *, tenant: str) -> ApiDecision | None:
        """None when the group has no rules; raises LimitsUnavailableError without Redis."""
        decided = await self._admit(group, {"tenant": tenant, "global": "all"})
        return decided[0] if decided else None

    async def charge_auth_attempt(self, ip: str) -> AuthAttempt | None:
        """Charge a failed authentication to the client at `ip` before its key is looked
        up. None when nothing is limited, or the limits store is unreachable: then the
        lookup goes ahead (each one is a single indexed query) rather than locking every
        new key out while Redis is away."""
        if not self.enabled:
            return None
        try:
            decided = await self._admit("auth_failures", {"ip": ip, "global": "all"})
        except LimitsUnavailableError:
            self.count_unavailable()
            return None
        if decided is None:
            return None
        decision, admission = decided
        return AuthAttempt(decision, admission.grant)

    async def refund(self, attempt: AuthAttempt) -> None:
        """The key was live: give the charged failure back."""
        if attempt.grant is None:
            return
        try:
            await self._backend.release(attempt.grant, refund=True)
        except LimitsUnavailableError:
            self.count_unavailable()

    async def _admit(
        self, group: str, subject: dict[str, str]
    ) -> tuple[ApiDecision, Admission] | None:
        rules = self._rules[group]
        if not rules:
            return None
        items = [
            Acquire(limit, f"api:{group}:{rule.scope}:{subject[rule.scope]}")
            for rule, limit in rules
        ]
        admission = await self._backend.admit(items, holder=_request_id())
        # Report the rule closest to saying no (or the one that did).
        tightest = min(
            range(len(rules)),
            key=lambda i: (admission.decisions[i].allowed, admission.decisions[i].remaining),
        )
        rule, decision = rules[tightest][0], admission.decisions[tightest]
        retry = math.ceil(admission.retry_after.total_seconds()) if not admission.allowed else 0
        if not admission.allowed:
            self._counters.api_rate_limited += 1
        return ApiDecision(
            allowed=admission.allowed,
            limit=rule.limit,
            remaining=max(0, int(decision.remaining)),
            reset_s=retry if not admission.allowed else math.ceil(rule.window_s),
            retry_after_s=max(retry, 1) if not admission.allowed else 0,
            rule=f"{rule.limit} per {rule.window_s:g}s per {rule.scope}",
        ), admission


def _request_id() -> str:
    return new_id().hex
