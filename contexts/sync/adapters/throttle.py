"""The tenant's vendor budget for calls made inside a sync (after the first)."""

import asyncio

from contexts.sync.application.ports import VendorThrottle
from jobrail import TokenBucket
from jobrail.kernel.errors import ThrottledError, TransientError
from jobrail.kernel.ids import TenantId, new_id
from jobrail.ports import Acquire, KeyTemplate, LimitsBackend, LimitsUnavailableError


class LimitsVendorThrottle(VendorThrottle):
    def __init__(self, limits: LimitsBackend, bucket: TokenBucket, max_wait_s: float) -> None:
        self._limits = limits
        self._bucket = bucket
        self._max_wait_s = max_wait_s

    async def wait_turn(self, tenant_id: TenantId) -> None:
        item = Acquire(self._bucket, KeyTemplate(self._bucket.key).render({"tenant_id": tenant_id}))
        waited = 0.0
        while True:
            try:
                admission = await self._limits.admit([item], holder=new_id().hex)
            except LimitsUnavailableError as exc:
                raise TransientError(f"cannot check the vendor budget: {exc}") from exc
            if admission.allowed:
                return
            wait = admission.retry_after.total_seconds()
            if waited + wait > self._max_wait_s:
                # Long wait: give the worker back and come back later (no attempt spent).
                raise ThrottledError("the tenant's vendor budget is spent", retry_after_s=wait)
            await asyncio.sleep(wait)
            waited += wait
