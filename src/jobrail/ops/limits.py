"""What operators do with limits: look at one, or clear it (a stuck lock, a full window)."""

from dataclasses import dataclass
from typing import Any

from jobrail.jobs.registry import JobRegistry
from jobrail.kernel.errors import NotFoundError
from jobrail.limits.model import Acquire, Limit, LimitsBackend


@dataclass(frozen=True, slots=True)
class LimitState:
    job_type: str
    limit: str
    kind: str
    key: str
    allowed: bool
    remaining: float
    retry_after_s: float


class LimitsAdmin:
    def __init__(self, registry: JobRegistry, backend: LimitsBackend) -> None:
        self._registry = registry
        self._backend = backend

    def _item(self, job_type: str, limit_name: str, key: str) -> Acquire:
        spec = self._registry.spec(job_type)
        if spec is None:
            raise NotFoundError(f"job type {job_type!r} not found")
        declared: dict[str, Limit] = {limit.name: limit for limit in spec.limits.all()}
        limit = declared.get(limit_name)
        if limit is None:
            names = ", ".join(sorted(declared)) or "none"
            raise NotFoundError(
                f"job type {job_type!r} has no limit {limit_name!r} (it has: {names})"
            )
        return Acquire(limit, key)

    async def peek(self, job_type: str, limit_name: str, key: str) -> LimitState:
        item = self._item(job_type, limit_name, key)
        decision = await self._backend.peek(item)
        return LimitState(
            job_type=job_type,
            limit=limit_name,
            kind=item.limit.kind,
            key=key,
            allowed=decision.allowed,
            remaining=decision.remaining,
            retry_after_s=decision.retry_after_s,
        )

    async def holders(self, job_type: str, limit_name: str, key: str) -> list[dict[str, Any]]:
        return await self._backend.holders(self._item(job_type, limit_name, key))

    async def reset(self, job_type: str, limit_name: str, key: str) -> None:
        await self._backend.reset(self._item(job_type, limit_name, key))
