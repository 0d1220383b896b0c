"""The flows table (batches and chains) and the lookups of their jobs, in a unit of work."""

import uuid
from collections.abc import Sequence
from typing import Any

from sqlalchemy import Select, func, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from jobrail.jobs.domain import FlowRole, Job, JobStatus
from jobrail.jobs.flow import Flow, FlowKind, FlowStatus
from jobrail.kernel.ids import TenantId
from jobrail.store.dialects import insert_or_existing
from jobrail.store.errors import database_errors
from jobrail.store.mapping import job_from_row
from jobrail.store.platform_schema import qualified
from jobrail.store.queries import FLOW_ORDER
from jobrail.store.tables import flows, jobs


def flow_from_row(row: Any) -> Flow:
    return Flow(
        id=row["id"],
        tenant_id=TenantId(row["tenant_id"]),
        kind=FlowKind(row["kind"]),
        total=row["total"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        succeeded=row["succeeded"],
        failed=row["failed"],
        cancelled=row["cancelled"],
        status=FlowStatus(row["status"]),
        cancel_requested=row["cancel_requested"],
        finished_at=row["finished_at"],
        idempotency_key=row["idempotency_key"],
        name=row["name"],
        callbacks={FlowRole(role): uuid.UUID(job_id) for role, job_id in row["callbacks"].items()},
    )


def member_counts(flow_ids: Sequence[uuid.UUID]) -> Select[uuid.UUID, str, int]:
    """The members of these flows by status (callbacks not counted): rows of flow id,
    status and count."""
    return (
        select(jobs.c.flow_id, jobs.c.status, func.count())
        .where(jobs.c.flow_id.in_(flow_ids), jobs.c.flow_role == FlowRole.MEMBER.value)
        .group_by(jobs.c.flow_id, jobs.c.status)
    )


def _state(flow: Flow) -> dict[str, Any]:
    return {
        "status": flow.status.value,
        "total": flow.total,
        "succeeded": flow.succeeded,
        "failed": flow.failed,
        "cancelled": flow.cancelled,
        "cancel_requested": flow.cancel_requested,
        "callbacks": {role.value: str(job_id) for role, job_id in flow.callbacks.items()},
        "updated_at": flow.updated_at,
        "finished_at": flow.finished_at,
    }


class SqlaFlowRepository:
    """`schema`: as SqlaJobRepository's."""

    def __init__(self, session: AsyncSession, schema: str | None = None) -> None:
        self._session = session
        self._options = qualified(schema)

    async def add(self, flow: Flow) -> Flow:
        row = {
            "id": flow.id,
            "tenant_id": flow.tenant_id,
            "kind": flow.kind.value,
            "name": flow.name,
            "idempotency_key": flow.idempotency_key,
            "created_at": flow.created_at,
            **_state(flow),
        }
        with database_errors():
            existing = await insert_or_existing(
                self._session, flows, row, self._options, "a batch", other=jobs
            )
        return flow if existing is None else flow_from_row(existing)

    async def get(
        self, flow_id: uuid.UUID, tenant_id: TenantId | None = None, *, for_update: bool = False
    ) -> Flow | None:
        query = select(flows).where(flows.c.id == flow_id)
        if tenant_id is not None:
            query = query.where(flows.c.tenant_id == tenant_id)
        if for_update:
            query = query.with_for_update()
        with database_errors():
            row = (
                (await self._session.execute(query, execution_options=self._options))
                .mappings()
                .first()
            )
        return flow_from_row(row) if row else None

    async def save(self, flow: Flow) -> None:
        with database_errors():
            await self._session.execute(
                update(flows).where(flows.c.id == flow.id).values(_state(flow)),
                execution_options=self._options,
            )

    async def jobs(
        self,
        flow_id: uuid.UUID,
        *,
        roles: Sequence[FlowRole] | None = None,
        statuses: Sequence[JobStatus] | None = None,
        for_update: bool = False,
        limit: int | None = None,
    ) -> list[Job]:
        query = select(jobs).where(jobs.c.flow_id == flow_id)
        if roles is not None:
            query = query.where(jobs.c.flow_role.in_([role.value for role in roles]))
        if statuses is not None:
            query = query.where(jobs.c.status.in_([status.value for status in statuses]))
        query = query.order_by(*FLOW_ORDER).limit(limit)
        if for_update:
            query = query.with_for_update()
        with database_errors():
            rows = (
                (await self._session.execute(query, execution_options=self._options))
                .mappings()
                .all()
            )
        return [job_from_row(row) for row in rows]

    async def counts(self, flow_id: uuid.UUID) -> dict[JobStatus, int]:
        with database_errors():
            rows = (
                await self._session.execute(
                    member_counts([flow_id]), execution_options=self._options
                )
            ).all()
        return {JobStatus(status): count for _, status, count in rows}
