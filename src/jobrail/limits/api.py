"""API rate limits: every rule of a route group checked in one round trip."""

import math
from dataclasses import dataclass

from jobrail.kernel.ids import new_id
from jobrail.limits.counters import LimitCounters
from jobrail.limits.model import Acquire, LimitsBackend, SlidingWindow, TokenBucket
from jobrail.settings import ApiLimitRule, ApiLimitsSettings


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
            for group in ("enqueue", "read")
        }

    @property
    def enabled(self) -> bool:
        return self._settings.enabled

    def count_unavailable(self) -> None:
        self._counters.api_unavailable += 1

    def fails_open(self, group: str) -> bool:
        return group == "read" and self._settings.read_fail_open

    async def check(self, group: str, *, ip: str, tenant: str) -> ApiDecision | None:
        """None when the group has no rules; raises LimitsUnavailableError without Redis."""
        rules = self._rules[group]
        if not rules:
            return None
        subject = {"ip": ip, "tenant": tenant, "global": "all"}
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
        )


def _request_id() -> str:
    return new_id().hex
