"""Everything the overview shows, read at most once per few seconds in each process: N
tabs refreshing it, on one API replica, cost one read of each kind per
``JOBRAIL_OPS__OVERVIEW_CACHE_S``, not one per tab."""

from dataclasses import dataclass

from jobrail.jobs.workflows import FlowView
from jobrail.ops.cache import ShortCache
from jobrail.ops.overview import GetOpsOverview, OpsOverview
from jobrail.ops.views import ListOpsFlows
from jobrail.webhooks.use_cases import GetWebhooksOverview, WebhooksOverview


@dataclass(frozen=True, slots=True)
class OverviewData:
    overview: OpsOverview
    flows: list[FlowView]
    webhooks: WebhooksOverview


class GetOverviewData:
    def __init__(
        self,
        overview: GetOpsOverview,
        flows: ListOpsFlows,
        webhooks: GetWebhooksOverview,
        cache_s: float,
    ) -> None:
        self._overview = overview
        self._flows = flows
        self._webhooks = webhooks
        self._cache: ShortCache[OverviewData] = ShortCache(cache_s)

    async def __call__(self) -> OverviewData:
        return await self._cache.get(self._read)

    async def _read(self) -> OverviewData:
        return OverviewData(await self._overview(), await self._flows(), await self._webhooks())
