"""API rate limits: every rule of a route group checked in one round trip.

``enqueue`` and ``read`` limit authenticated traffic, per tenant and globally.
``auth_failures`` limits failed authentications per client address. Before a key the
process does not know to be live is looked up, the client's budget is only *peeked*
at: a client that has already spent it gets a 429 and no lookup, so a flood of wrong
keys does not become a flood of database lookups. A failure is charged only once the
lookup has found the key unknown or revoked. Charging every lookup in advance and
refunding the live ones (as this did before) let concurrent requests with one good key
be refused before the first refund came back, and turned every live key whose cache
entry had expired into a 429 while a neighbour behind the same address retried a bad
key. Concurrent wrong keys can each pass the peek before their failures are charged:
at most one lookup per request in flight beyond the budget.
"""

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta

from jobrail.kernel.ids import random_hex
from jobrail.limits.counters import LimitCounters
from jobrail.limits.model import (
    Acquire,
    Admission,
    Decision,
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

    async def auth_budget(self, ip: str) -> ApiDecision | None:
        """Whether the client at `ip` may still fail an authentication, charging
        nothing. None when nothing is limited, or the limits store is unreachable: then
        the lookup goes ahead (each one is a single indexed query) rather than locking
        every new key out while Redis is away."""
        rules = self._auth_rules()
        if not rules:
            return None
        items = self._items("auth_failures", {"ip": ip, "global": "all"})
        try:
            decisions = await self._backend.peek_all(items)  # every rule in one round trip
        except LimitsUnavailableError:
            self.count_unavailable()
            return None
        allowed = all(decision.allowed for decision in decisions)
        waits = [d.retry_after for d in decisions if not d.allowed and d.retry_after]
        return self._decision("auth_failures", decisions, allowed, max(waits, default=None))

    async def charge_auth_failure(self, ip: str) -> None:
        """A key from `ip` was looked up and is not live: charge it to the client."""
        if not self._auth_rules():
            return
        try:
            await self._backend.admit(
                self._items("auth_failures", {"ip": ip, "global": "all"}), holder=_request_id()
            )
        except LimitsUnavailableError:
            self.count_unavailable()

    def _auth_rules(self) -> list[tuple[ApiLimitRule, SlidingWindow | TokenBucket]]:
        return self._rules["auth_failures"] if self.enabled else []

    def _items(self, group: str, subject: dict[str, str]) -> list[Acquire]:
        return [
            Acquire(limit, f"api:{group}:{rule.scope}:{subject[rule.scope]}")
            for rule, limit in self._rules[group]
        ]

    async def _admit(
        self, group: str, subject: dict[str, str]
    ) -> tuple[ApiDecision, Admission] | None:
        if not self._rules[group]:
            return None
        admission = await self._backend.admit(self._items(group, subject), holder=_request_id())
        decision = self._decision(
            group, admission.decisions, admission.allowed, admission.retry_after
        )
        return decision, admission

    def _decision(
        self,
        group: str,
        decisions: Sequence[Decision],
        allowed: bool,
        retry_after: timedelta | None,
    ) -> ApiDecision:
        rules = self._rules[group]
        # Report the rule closest to saying no (or the one that did).
        tightest = min(
            range(len(rules)),
            key=lambda i: (decisions[i].allowed, decisions[i].remaining),
        )
        rule, decision = rules[tightest][0], decisions[tightest]
        retry = math.ceil(retry_after.total_seconds()) if not allowed and retry_after else 0
        if not allowed:
            self._counters.api_rate_limited += 1
        return ApiDecision(
            allowed=allowed,
            limit=rule.limit,
            remaining=max(0, int(decision.remaining)),
            reset_s=retry if not allowed else math.ceil(rule.window_s),
            retry_after_s=max(retry, 1) if not allowed else 0,
            rule=f"{rule.limit} per {rule.window_s:g}s per {rule.scope}",
        )


def _request_id() -> str:
    """The request's holder in the limits (a sliding window's entries are named after
    it): random, so unique across processes, and not time-ordered, which nothing here
    needs (a third of the cost of a UUIDv7)."""
    return random_hex(16)
