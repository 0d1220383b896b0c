"""A job type declared on a ``JobRail``: what the host enqueues it with."""

from datetime import datetime, timedelta
from typing import Generic, Protocol, TypeVar

from pydantic import BaseModel
from sqlalchemy.ext.asyncio import AsyncSession

from jobrail.jobs.intake import EnqueueJobCommand, EnqueueResult
from jobrail.jobs.priority import Priority
from jobrail.jobs.registry import JobSpec
from jobrail.jobs.timing import resolve_options
from jobrail.kernel.errors import InvalidInputError
from jobrail.kernel.ids import TenantId

P = TypeVar("P", bound=BaseModel)


class Enqueues(Protocol):
    """What a handle enqueues through (``JobRail.enqueue``)."""

    async def enqueue(
        self, cmd: EnqueueJobCommand, *, session: AsyncSession | None = None
    ) -> EnqueueResult: ...

    async def now(self) -> datetime: ...


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
        run_at: datetime | None = None,
        delay: float | timedelta | None = None,
        deadline: datetime | None = None,
        unique_key: str | None = None,
        debounce_key: str | None = None,
        debounce_s: float | None = None,
        priority: Priority | str | None = None,
        entity_id: str | None = None,
        session: AsyncSession | None = None,
        run_after: datetime | None = None,
    ) -> EnqueueResult:
        """Record a job of this type for `tenant_id` and publish it once it is committed.

        Without `session` the job commits on its own, at once. With `session` (the host's
        own, on jobrail's database) the job and its message are written in that session's
        transaction: they commit with the host's other writes, and the message leaves only
        after the host's commit; a rollback leaves nothing. The same `idempotency_key` (per
        tenant) returns the job made the first time. `payload` is stored as it dumps: a
        ``P`` was validated when it was made.

        The job may start at `run_at` (timezone-aware; a past time: at once) or `delay`
        (seconds or a timedelta) from now, not both; `deadline` is when it must have
        started by, and `unique_key` keeps one unfinished job of this type per key and
        tenant. Enqueues with one `debounce_key` within `debounce_s` seconds of the first
        collapse into one job that starts when that window closes, with the last payload.
        `priority` (``"low"`` to ``"urgent"``; its type's by default) orders it among the
        tenant's jobs under fair dispatch (jobrail.jobs.priority).
        InvalidInputError for an option that does not hold (see
        ``jobrail.jobs.timing.resolve_options``). `run_after` is the former name of
        `run_at`."""
        if run_after is not None:
            if run_at is not None:
                raise InvalidInputError("run_after is the former name of run_at: give one")
            run_at = run_after
        options = resolve_options(
            await self._rail.now(),
            run_at=run_at,
            delay=delay,
            deadline=deadline,
            unique_key=unique_key,
            debounce_key=debounce_key,
            debounce_s=debounce_s,
            priority=priority,
        )
        cmd = options.command(
            tenant_id=TenantId(tenant_id),
            type=self.spec.name,
            payload=payload,
            idempotency_key=idempotency_key,
            entity_id=entity_id,
        )
        return await self._rail.enqueue(cmd, session=session)

    def __repr__(self) -> str:
        return f"JobHandle({self.spec.name!r})"
