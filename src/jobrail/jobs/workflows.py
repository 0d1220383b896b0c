"""Starting batches and chains, adding to a batch, cancelling one, and what a member's
end does to the rest (see jobrail.jobs.flow).

`Workflows` works in a unit of work its caller has open: a use case defines a batch
or a chain in its own transaction, and the flow's rows and its first messages commit
with the business write or not at all. `FlowService` is the same in a transaction of
its own, for routes.
"""

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from jobrail.jobs.domain import FlowLink, FlowRole, Job, JobStatus
from jobrail.jobs.enqueue import message_for, new_job
from jobrail.jobs.flow import Flow, FlowCounts, FlowId, FlowKind
from jobrail.jobs.intake import EnqueueJobCommand, JobCatalog, JobType
from jobrail.jobs.ports import JobsUnitOfWork
from jobrail.kernel.clock import Clock
from jobrail.kernel.errors import ConflictError, InvalidInputError, NotFoundError
from jobrail.kernel.ids import JobId, TenantId, new_id
from jobrail.kernel.keys import fitted_or_none

MAX_FLOW_JOBS = 10_000
"""The most members one batch or chain is started (or grown) with in one call."""

_CALLBACKS = (FlowRole.THEN, FlowRole.CATCH, FlowRole.FINALLY)


@dataclass(frozen=True, slots=True)
class FlowJob:
    """A job of a batch or chain: its type and payload (tenant, idempotency key and
    entity are the flow's)."""

    type: str
    payload: object
    entity_id: str | None = None


@dataclass(frozen=True, slots=True)
class BatchCommand:
    tenant_id: TenantId
    jobs: Sequence[FlowJob]
    then: FlowJob | None = None
    catch: FlowJob | None = None
    finally_: FlowJob | None = None
    idempotency_key: str | None = None
    name: str | None = None


@dataclass(frozen=True, slots=True)
class ChainCommand:
    tenant_id: TenantId
    steps: Sequence[FlowJob]
    idempotency_key: str | None = None
    name: str | None = None


@dataclass(frozen=True, slots=True)
class FlowStarted:
    flow: Flow
    members: list[Job]
    callbacks: dict[FlowRole, Job] = field(default_factory=dict)
    created: bool = True
    """False: the idempotency key had started this flow already (nothing new written)."""


@dataclass(frozen=True, slots=True)
class FlowView:
    flow: Flow
    counts: FlowCounts


async def locked_with_flow(
    uow: JobsUnitOfWork, job_id: JobId, tenant_id: TenantId | None
) -> tuple[Job | None, Flow | None]:
    """The job, locked, and when it is a member of a batch or chain, its flow, locked
    before it (the order every writer of a flow's jobs keeps)."""
    job = await uow.jobs.get(job_id, tenant_id)
    if job is None or job.flow is None or job.flow.role is not FlowRole.MEMBER:
        return await uow.jobs.get(job_id, tenant_id, for_update=True), None
    flow = await uow.flows.get(job.flow.flow_id, for_update=True)
    return await uow.jobs.get(job_id, tenant_id, for_update=True), flow


class Workflows:
    def __init__(self, catalog: JobCatalog, clock: Clock, default_max_attempts: int) -> None:
        self._catalog = catalog
        self._clock = clock
        self._default_max_attempts = default_max_attempts

    async def start_batch(self, uow: JobsUnitOfWork, cmd: BatchCommand) -> FlowStarted:
        _check_size(cmd.jobs, "batch")
        callbacks = {
            role: spec
            for role, spec in zip(_CALLBACKS, (cmd.then, cmd.catch, cmd.finally_), strict=True)
            if spec is not None
        }
        return await self._start(
            uow, FlowKind.BATCH, cmd.tenant_id, cmd.jobs, callbacks, cmd.idempotency_key, cmd.name
        )

    async def start_chain(self, uow: JobsUnitOfWork, cmd: ChainCommand) -> FlowStarted:
        _check_size(cmd.steps, "chain")
        return await self._start(
            uow, FlowKind.CHAIN, cmd.tenant_id, cmd.steps, {}, cmd.idempotency_key, cmd.name
        )

    async def add_to_batch(
        self, uow: JobsUnitOfWork, tenant_id: TenantId, flow_id: FlowId, jobs: Sequence[FlowJob]
    ) -> list[Job]:
        """Add members to a running batch (from one of its own jobs too)."""
        _check_size(jobs, "batch")
        flow = await self._locked(uow, flow_id, tenant_id)
        now = self._clock.now()
        first = flow.total
        flow.grow(len(jobs), now)
        added = [
            self._make(flow, spec, FlowRole.MEMBER, first + i, blocked=False, now=now)
            for i, spec in enumerate(jobs)
        ]
        await self._write(uow, added)
        await uow.flows.save(flow)
        return added

    async def cancel(self, uow: JobsUnitOfWork, tenant_id: TenantId, flow_id: FlowId) -> Flow:
        """Cancel every member that has not started (a chain's blocked steps too) and ask
        the running ones to stop; the callbacks follow from those ends as always (a
        cancelled batch runs its `finally`, never its `then`)."""
        flow = await self._locked(uow, flow_id, tenant_id)
        now = self._clock.now()
        flow.request_cancel(now)
        members = await uow.flows.jobs(
            flow.id,
            roles=[FlowRole.MEMBER],
            statuses=[
                JobStatus.PENDING,
                JobStatus.RETRYING,
                JobStatus.BLOCKED,
                JobStatus.RUNNING,
            ],
            for_update=True,
        )
        for job in members:
            job.cancel(now)
            await uow.jobs.save(job)
        for job in members:
            if job.status is JobStatus.CANCELLED:
                await self.job_ended(uow, flow, job)
        await uow.flows.save(flow)
        return flow

    async def get(self, uow: JobsUnitOfWork, tenant_id: TenantId, flow_id: FlowId) -> FlowView:
        flow = await uow.flows.get(flow_id, tenant_id)
        if flow is None:
            raise NotFoundError(f"batch or chain {flow_id} not found")
        return FlowView(flow, FlowCounts.of(await uow.flows.counts(flow_id)))

    async def lock(self, uow: JobsUnitOfWork, flow_id: FlowId) -> Flow | None:
        """The flow's row, locked until the transaction ends (before any job's row)."""
        return await uow.flows.get(flow_id, for_update=True)

    async def job_ended(self, uow: JobsUnitOfWork, flow: Flow, job: Job) -> None:
        """Count the end of `job` (its end already written in `uow`) on `flow` (locked),
        and release or stop what that decides. The caller saves the flow, once after
        all the ends it counts in the transaction."""
        if job.flow is None or job.flow.role is not FlowRole.MEMBER:
            return  # a callback's end is not counted
        now = self._clock.now()
        first = flow.member_ended(job.status, now, job.flow.step)
        effects = [first]
        if first.release_step is not None or first.stop_after is not None:
            for step in await self._blocked(uow, flow, [FlowRole.MEMBER]):
                at = step.flow.step if step.flow is not None else None
                if at is None:
                    continue
                if at == first.release_step:
                    await self._release(uow, step, now)
                elif first.stop_after is not None and at > first.stop_after[0]:
                    step.stop_blocked(first.stop_after[1], now)
                    await uow.jobs.save(step)
                    effects.append(flow.member_ended(JobStatus.CANCELLED, now))
        release = [role for e in effects for role in e.release]
        stop = [item for e in effects for item in e.stop]
        if release or stop:
            callbacks = {
                callback.flow.role: callback
                for callback in await self._blocked(uow, flow, list(_CALLBACKS))
                if callback.flow is not None
            }
            for role in release:
                if role in callbacks:
                    await self._release(uow, callbacks.pop(role), now)
            for role, reason in stop:
                if role in callbacks:
                    callback = callbacks.pop(role)
                    callback.stop_blocked(reason, now)
                    await uow.jobs.save(callback)

    async def _start(
        self,
        uow: JobsUnitOfWork,
        kind: FlowKind,
        tenant_id: TenantId,
        specs: Sequence[FlowJob],
        callbacks: dict[FlowRole, FlowJob],
        idempotency_key: str | None,
        name: str | None,
    ) -> FlowStarted:
        now = self._clock.now()
        candidate = Flow(
            id=new_id(),
            tenant_id=tenant_id,
            kind=kind,
            total=len(specs),
            created_at=now,
            updated_at=now,
            idempotency_key=idempotency_key,
            name=name,
        )
        # Every job is checked, and made, before anything is written.
        for spec in [*specs, *callbacks.values()]:
            self._check(spec)
        members = [
            self._make(
                candidate,
                spec,
                FlowRole.MEMBER,
                i,
                blocked=kind is FlowKind.CHAIN and i > 0,
                now=now,
            )
            for i, spec in enumerate(specs)
        ]
        made = {
            role: self._make(candidate, spec, role, None, blocked=True, now=now)
            for role, spec in callbacks.items()
        }
        flow = await uow.flows.add(candidate)
        if flow.id != candidate.id:
            return await self._replayed(uow, flow, kind, name, members, made)
        await self._write(uow, [*members, *made.values()])
        flow.callbacks = {role: job.id for role, job in made.items()}
        await uow.flows.save(flow)
        return FlowStarted(flow=flow, members=members, callbacks=made)

    def _check(self, spec: FlowJob) -> JobType:
        job_type = self._catalog.get(spec.type)
        if job_type is None:
            raise InvalidInputError(f"unknown job type {spec.type!r}")
        return job_type

    async def _replayed(
        self,
        uow: JobsUnitOfWork,
        flow: Flow,
        kind: FlowKind,
        name: str | None,
        members: list[Job],
        callbacks: dict[FlowRole, Job],
    ) -> FlowStarted:
        """The flow an earlier request made with the same idempotency key, if it was the
        same request (the same kind and name, the same jobs in the same order and the same
        callbacks); a different one is a conflict, as it is for a single job."""
        key = flow.idempotency_key
        if flow.kind is not kind:
            raise ConflictError(f"Idempotency-Key {key!r} was already used for a {flow.kind.value}")
        jobs = await uow.flows.jobs(flow.id)
        stored = sorted(
            (j for j in jobs if j.flow and j.flow.role is FlowRole.MEMBER),
            key=lambda j: j.flow.step if j.flow and j.flow.step is not None else -1,
        )
        stored_callbacks = {j.flow.role: j for j in jobs if j.flow and j.flow.role in _CALLBACKS}

        def shape(job: Job) -> tuple[str, object, str | None]:
            return (job.type, job.payload, job.entity_id)

        # The request made its jobs with the flow, at the flow's very time; a batch's jobs
        # may add members later (at another time, whatever the hosts' clocks), and the
        # oldest finished jobs may be pruned before the flow: each step still stored is
        # compared, and none may be missing from the request or be a later one.
        made_with_it = {
            j.flow.step: j
            for j in stored
            if j.flow and j.flow.step is not None and j.created_at == flow.created_at
        }
        later = {j.flow.step for j in stored if j.flow and j.created_at != flow.created_at}
        same_members = (
            len(members) <= flow.total
            and all(step < len(members) for step in made_with_it)
            and not any(step in later for step in range(len(members)))
            and all(
                shape(made_with_it[step]) == shape(job)
                for step, job in enumerate(members)
                if step in made_with_it
            )
        )
        same_callbacks = set(flow.callbacks) == set(callbacks) and all(
            shape(stored_callbacks[role]) == shape(job)
            for role, job in callbacks.items()
            if role in stored_callbacks
        )
        if flow.name != fitted_or_none(name) or not same_members or not same_callbacks:
            raise ConflictError(
                f"Idempotency-Key {key!r} was already used for a different request "
                f"({flow.kind.value} {flow.id})"
            )
        return FlowStarted(flow=flow, members=stored, callbacks=stored_callbacks, created=False)

    def _make(
        self,
        flow: Flow,
        spec: FlowJob,
        role: FlowRole,
        step: int | None,
        *,
        blocked: bool,
        now: datetime,
    ) -> Job:
        job = new_job(
            self._check(spec),
            EnqueueJobCommand(
                tenant_id=flow.tenant_id,
                type=spec.type,
                payload=spec.payload,  # type: ignore[arg-type]
                entity_id=spec.entity_id,
                capped=False,  # a batch or chain is not capped (its jobs come together)
            ),
            now,
            self._default_max_attempts,
        )
        job.flow = FlowLink(flow.id, role, step)
        if blocked:
            job.status = JobStatus.BLOCKED
        return job

    async def _write(self, uow: JobsUnitOfWork, new: Sequence[Job]) -> None:
        """The jobs in one statement, the messages of those not blocked in another."""
        await uow.jobs.add_new(new)
        await uow.outbox.add_many(
            [
                message_for(job, self._catalog.get(job.type))
                for job in new
                if job.status is JobStatus.PENDING
            ]
        )

    async def _release(self, uow: JobsUnitOfWork, job: Job, now: datetime) -> None:
        job.release(now)
        await uow.jobs.save(job)
        await uow.outbox.add(message_for(job, self._catalog.get(job.type)))

    async def _blocked(self, uow: JobsUnitOfWork, flow: Flow, roles: list[FlowRole]) -> list[Job]:
        return await uow.flows.jobs(
            flow.id, roles=roles, statuses=[JobStatus.BLOCKED], for_update=True
        )

    async def _locked(self, uow: JobsUnitOfWork, flow_id: FlowId, tenant_id: TenantId) -> Flow:
        flow = await uow.flows.get(flow_id, tenant_id, for_update=True)
        if flow is None:
            raise NotFoundError(f"batch or chain {flow_id} not found")
        return flow


def _check_size(jobs: Sequence[FlowJob], kind: str) -> None:
    if not jobs:
        raise InvalidInputError(f"a {kind} needs at least one job")
    if len(jobs) > MAX_FLOW_JOBS:
        raise InvalidInputError(f"a {kind} takes at most {MAX_FLOW_JOBS} jobs at once")
