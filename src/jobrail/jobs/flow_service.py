"""Batches and chains for a caller with no transaction of its own (a route, the
facade): each call of `FlowService` is one unit of work over `Workflows`."""

from collections.abc import Callable, Sequence

from jobrail.jobs.domain import Job
from jobrail.jobs.flow import FlowId
from jobrail.jobs.ports import JobsUnitOfWork
from jobrail.jobs.workflows import (
    BatchCommand,
    ChainCommand,
    FlowJob,
    FlowStarted,
    FlowView,
    Workflows,
)
from jobrail.kernel.ids import TenantId


class FlowService:
    """Workflows in a transaction of their own (for routes)."""

    def __init__(self, units: Callable[[], JobsUnitOfWork], workflows: Workflows) -> None:
        self._units = units
        self._workflows = workflows

    async def batch(self, cmd: BatchCommand) -> FlowStarted:
        async with self._units() as uow:
            started = await self._workflows.start_batch(uow, cmd)
            await uow.commit()
        return started

    async def chain(self, cmd: ChainCommand) -> FlowStarted:
        async with self._units() as uow:
            started = await self._workflows.start_chain(uow, cmd)
            await uow.commit()
        return started

    async def add_to_batch(
        self, tenant_id: TenantId, flow_id: FlowId, jobs: Sequence[FlowJob]
    ) -> list[Job]:
        async with self._units() as uow:
            added = await self._workflows.add_to_batch(uow, tenant_id, flow_id, jobs)
            await uow.commit()
        return added

    async def cancel(self, tenant_id: TenantId, flow_id: FlowId) -> FlowView:
        async with self._units() as uow:
            await self._workflows.cancel(uow, tenant_id, flow_id)
            view = await self._workflows.get(uow, tenant_id, flow_id)
            await uow.commit()
        return view

    async def get(self, tenant_id: TenantId, flow_id: FlowId) -> FlowView:
        async with self._units() as uow:
            return await self._workflows.get(uow, tenant_id, flow_id)
