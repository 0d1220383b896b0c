"""A job type declared on a ``JobRail``: what the host enqueues it with."""

from datetime import datetime
from typing import Generic, Protocol, TypeVar

from pydantic import BaseModel
from sqlalchemy.ext.asyncio import AsyncSession

from jobrail.jobs.intake import EnqueueJobCommand, EnqueueResult
from jobrail.jobs.registry import JobSpec
from jobrail.kernel.ids import TenantId

P = TypeVar("P", bound=BaseModel)


class Enqueues(Protocol):
    """What a handle enqueues through (``JobRail.enqueue``)."""

    async def enqueue(
        self, cmd: EnqueueJobCommand, *, session: AsyncSession | None = None
    ) -> EnqueueResult: ...


class JobHandle(Generic[P]):
    """The job type ``spec``, declared with ``@rail.job(...)``; its payload is a ``P``."""

    def __init__(self, rail: Enqueues, spec: JobSpec) -> None:
        self._rail = rail
        self.spec = spec

    @property
    def name(self) -> str:
        return self.spec.name

    async def enqueue(
        self,
        payload: P,
        *,
        tenant_id: str,
        idempotency_key: str | None = None,
        run_after: datetime | None = None,
        entity_id: str | None = None,
        session: AsyncSession | None = None,
    ) -> EnqueueResult:
        """Record a job of this type for `tenant_id` and publish it once it is committed.

        Without `session` the job commits on its own, at once. With `session` (the host's
        own, on jobrail's database) the job and its message are written in that session's
        transaction: they commit with the host's other writes, and the message leaves only
        after the host's commit; a rollback leaves nothing. The same `idempotency_key` (per
        tenant) returns the job made the first time. `payload` is stored as it dumps: a
        ``P`` was validated when it was made."""
        cmd = EnqueueJobCommand(
            tenant_id=TenantId(tenant_id),
            type=self.spec.name,
            payload=payload,
            idempotency_key=idempotency_key,
            entity_id=entity_id,
            run_after=run_after,
        )
        return await self._rail.enqueue(cmd, session=session)

    def __repr__(self) -> str:
        return f"JobHandle({self.spec.name!r})"
