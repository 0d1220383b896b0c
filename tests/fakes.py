"""Hand-written fakes of the jobs ports. They keep state; tests assert on that state."""

import copy
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Self

from jobrail.jobs.domain import CLAIMABLE_STATUSES, FlowRole, Job, JobStatus
from jobrail.jobs.flow import Flow
from jobrail.jobs.messages import DeadLetter, Outgoing
from jobrail.jobs.ports import ClaimToken, Cursor, JobFilter, JobPage
from jobrail.jobs.progress import JobProgress
from jobrail.jobs.registry import JobRegistry
from jobrail.kernel.errors import BrokerUnavailableError, StoreUnavailableError
from jobrail.kernel.ids import JobId, TenantId
from jobrail.transport.codec import Envelope, describe_dead_letter, encode, publish_side_by_side
from jobrail.worker.job_store import ClaimResult, JobIdentity, WaitNote

START = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
# A job catalog that knows no type (no limit keys for any job).
NO_TYPES = JobRegistry([], queues=["jobs.default"], default_timeout_s=10)


class FixedClock:
    def __init__(self, now: datetime = START) -> None:
        self.current = now

    def now(self) -> datetime:
        return self.current

    def advance(self, delta: timedelta) -> None:
        self.current += delta


# The statuses in which a job holds its unique key (the partial unique index's).
ACTIVE = frozenset({JobStatus.PENDING, JobStatus.RETRYING, JobStatus.RUNNING})


class FakeJobRepository:
    def __init__(self, jobs: dict[JobId, Job]) -> None:
        self._jobs = jobs

    async def add(self, job: Job) -> Job:
        if job.debounce_key is not None:
            for existing in self._jobs.values():
                if (existing.tenant_id, existing.type, existing.debounce_key) == (
                    job.tenant_id,
                    job.type,
                    job.debounce_key,
                ) and existing.status is JobStatus.PENDING:
                    existing.payload, existing.updated_at = job.payload, job.updated_at
                    return copy.deepcopy(existing)
        if job.idempotency_key is not None:
            for existing in self._jobs.values():
                if (existing.tenant_id, existing.idempotency_key) == (
                    job.tenant_id,
                    job.idempotency_key,
                ):
                    return copy.deepcopy(existing)
        if job.unique_key is not None:
            for existing in self._jobs.values():
                if (existing.tenant_id, existing.type, existing.unique_key) == (
                    job.tenant_id,
                    job.type,
                    job.unique_key,
                ) and existing.status in ACTIVE:
                    return copy.deepcopy(existing)
        self._jobs[job.id] = copy.deepcopy(job)
        return job

    async def get(
        self, job_id: JobId, tenant_id: TenantId | None = None, *, for_update: bool = False
    ) -> Job | None:
        job = self._jobs.get(job_id)
        if job is None or (tenant_id is not None and job.tenant_id != tenant_id):
            return None
        return copy.deepcopy(job)

    async def list(self, where: JobFilter, limit: int, after: Cursor | None) -> JobPage:
        matching = sorted(
            (
                job
                for job in self._jobs.values()
                if job.tenant_id == where.tenant_id
                and (where.status is None or job.status is where.status)
                and (where.type is None or job.type == where.type)
                and (where.entity_id is None or job.entity_id == where.entity_id)
                and (after is None or (job.created_at, job.id) < (after.created_at, after.job_id))
            ),
            key=lambda job: (job.created_at, job.id),
            reverse=True,
        )
        items = [copy.deepcopy(job) for job in matching[:limit]]
        more = len(matching) > limit
        cursor = Cursor(items[-1].created_at, items[-1].id) if more else None
        return JobPage(items=items, next_cursor=cursor)

    async def save(self, job: Job) -> None:
        self._jobs[job.id] = copy.deepcopy(job)

    async def add_new(self, jobs: Sequence[Job]) -> None:
        for job in jobs:
            self._jobs[job.id] = copy.deepcopy(job)

    async def save_held(self, job: Job, claim: ClaimToken) -> bool:
        current = self._jobs.get(job.id)
        if not FakeJobStore._running(current, claim):
            return False
        assert current is not None
        kept = current.cancel_requested  # the worker only reads it
        self._jobs[job.id] = copy.deepcopy(job)
        self._jobs[job.id].cancel_requested = kept
        return True

    async def save_held_many(self, held: Sequence[tuple[Job, ClaimToken]]) -> Sequence[bool]:
        return [await self.save_held(job, claim) for job, claim in held]


class FakeFlowRepository:
    """Flows in a dict, their jobs in the unit of work's jobs (FakeUnitOfWork)."""

    def __init__(self, flows: dict[uuid.UUID, Flow], jobs: dict[JobId, Job]) -> None:
        self._flows = flows
        self._jobs = jobs

    async def add(self, flow: Flow) -> Flow:
        if flow.idempotency_key is not None:
            for existing in self._flows.values():
                if (existing.tenant_id, existing.idempotency_key) == (
                    flow.tenant_id,
                    flow.idempotency_key,
                ):
                    return copy.deepcopy(existing)
        self._flows[flow.id] = copy.deepcopy(flow)
        return flow

    async def get(
        self, flow_id: uuid.UUID, tenant_id: TenantId | None = None, *, for_update: bool = False
    ) -> Flow | None:
        flow = self._flows.get(flow_id)
        if flow is None or (tenant_id is not None and flow.tenant_id != tenant_id):
            return None
        return copy.deepcopy(flow)

    async def save(self, flow: Flow) -> None:
        self._flows[flow.id] = copy.deepcopy(flow)

    async def jobs(
        self,
        flow_id: uuid.UUID,
        *,
        roles: Sequence[FlowRole] | None = None,
        statuses: Sequence[JobStatus] | None = None,
        for_update: bool = False,
        limit: int | None = None,
    ) -> list[Job]:
        found = [
            copy.deepcopy(job)
            for job in self._jobs.values()
            if job.flow is not None
            and job.flow.flow_id == flow_id
            and (roles is None or job.flow.role in roles)
            and (statuses is None or job.status in statuses)
        ]
        last = 1 << 62
        return sorted(
            found,
            key=lambda job: (
                job.flow.step if job.flow and job.flow.step is not None else last,
                job.created_at,
                job.id,
            ),
        )[:limit]

    async def counts(self, flow_id: uuid.UUID) -> dict[JobStatus, int]:
        counts: dict[JobStatus, int] = {}
        for job in await self.jobs(flow_id, roles=[FlowRole.MEMBER]):
            counts[job.status] = counts.get(job.status, 0) + 1
        return counts


class FakeJobIntake:
    """Stores jobs into a dict shared with FakeUnitOfWork, with the idempotency rule."""

    def __init__(self, store: dict[JobId, Job]) -> None:
        self.store = store
        self.messages: list[Envelope] = []

    async def add(self, job: Job, envelope: Envelope) -> Job:
        stored = await FakeJobRepository(self.store).add(job)
        if stored.id == job.id:
            self.messages.append(envelope)
        return stored


class FakeOutbox:
    def __init__(self) -> None:
        self.added: list[Envelope] = []

    async def add(self, message: Outgoing, *, dispatch: bool = True) -> None:
        self.added.append(encode(message))

    async def add_many(self, messages: Sequence[Outgoing]) -> None:
        self.added.extend(encode(message) for message in messages)


class FakeUnitOfWork:
    """Changes become visible in `store` (and `flows`) only on commit, like a real
    transaction."""

    def __init__(
        self, store: dict[JobId, Job] | None = None, flows: dict[uuid.UUID, Flow] | None = None
    ) -> None:
        self.store: dict[JobId, Job] = store if store is not None else {}
        self.flow_store: dict[uuid.UUID, Flow] = flows if flows is not None else {}
        self.published: list[Envelope] = []
        self.commits = 0
        self.committed = False

    async def __aenter__(self) -> Self:
        self._working = copy.deepcopy(self.store)
        self._working_flows = copy.deepcopy(self.flow_store)
        self.jobs = FakeJobRepository(self._working)
        self.flows = FakeFlowRepository(self._working_flows, self._working)
        self.outbox = FakeOutbox()
        self.committed = False
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self._working = {}
        self._working_flows = {}

    async def commit(self) -> None:
        self.store.clear()
        self.store.update(self._working)
        self.flow_store.clear()
        self.flow_store.update(self._working_flows)
        self.published.extend(self.outbox.added)
        self.outbox.added = []
        self.commits += 1
        self.committed = True


@dataclass
class FakeJobStore:
    """The worker's store over a dict, with the same conditional semantics as SQL."""

    jobs: dict[JobId, Job] = field(default_factory=dict)
    outbox: list[Envelope] = field(default_factory=list)
    unavailable_for: int = 0
    calls: int = 0
    wait_statements: int = 0
    progress_writes: int = 0

    def _maybe_fail(self) -> None:
        self.calls += 1
        if self.unavailable_for > 0:
            self.unavailable_for -= 1
            raise StoreUnavailableError("fake database is down")

    async def get(self, job_id: JobId) -> Job | None:
        self._maybe_fail()
        job = self.jobs.get(job_id)
        return copy.deepcopy(job) if job else None

    async def claim(
        self, job_id: JobId, now: datetime, lease: timedelta, expect: JobIdentity | None = None
    ) -> ClaimResult:
        self._maybe_fail()
        job = self.jobs.get(job_id)
        if job is None:
            return ClaimResult(job=None, current=None)
        foreign = expect is not None and (expect.tenant_id, expect.job_type) != (
            job.tenant_id,
            job.type,
        )
        if foreign or not job.can_start(now):
            return ClaimResult(job=None, current=copy.deepcopy(job))
        job.start(now, lease)
        return ClaimResult(job=copy.deepcopy(job))

    async def expire(self, job_id: JobId, now: datetime) -> Job | None:
        self._maybe_fail()
        job = self.jobs.get(job_id)
        if job is None or not job.can_expire(now):
            return None
        job.expire(now)
        return copy.deepcopy(job)

    async def record(self, job: Job, claim: ClaimToken, outbox: Sequence[Outgoing]) -> bool:
        self._maybe_fail()
        current = self.jobs.get(job.id)
        if not self._running(current, claim):
            return False
        assert current is not None
        cancel_requested = current.cancel_requested or job.cancel_requested
        self.jobs[job.id] = copy.deepcopy(job)
        self.jobs[job.id].cancel_requested = cancel_requested
        self.jobs[job.id].progress = current.progress  # written by write_progress only
        self.outbox.extend(encode(message) for message in outbox)
        return True

    async def extend_lease(self, job_id: JobId, claim: ClaimToken, until: datetime) -> bool:
        self._maybe_fail()
        current = self.jobs.get(job_id)
        if not self._running(current, claim):
            return False
        assert current is not None
        current.lease_until = until
        return True

    async def write_progress(self, job_id: JobId, claim: ClaimToken, progress: JobProgress) -> bool:
        self._maybe_fail()
        current = self.jobs.get(job_id)
        if not self._running(current, claim):
            return False
        assert current is not None
        current.progress = progress
        self.progress_writes += 1
        return True

    @staticmethod
    def _running(current: Job | None, claim: ClaimToken) -> bool:
        return (
            current is not None
            and current.status is JobStatus.RUNNING
            and current.attempts == claim.attempt
            and current.started_at == claim.started_at
        )

    async def cancel_requested(self, job_id: JobId) -> bool:
        self._maybe_fail()
        job = self.jobs.get(job_id)
        return bool(job and job.cancel_requested)

    async def flow_members(self, flow_id: uuid.UUID) -> list[Job]:
        return await FakeFlowRepository({}, self.jobs).jobs(flow_id, roles=[FlowRole.MEMBER])

    async def note_waits(self, notes: Sequence[WaitNote]) -> None:
        self.wait_statements += 1
        for note in notes:
            job = self.jobs.get(note.job_id)
            if job and job.status in CLAIMABLE_STATUSES and job.updated_at <= note.at:
                job.waiting = note.wait


@dataclass
class FakePublisher:
    published: list[Envelope] = field(default_factory=list)
    unavailable_for: int = 0

    async def publish(self, message: Outgoing | Envelope) -> None:
        """Records what it publishes as envelopes (the core's messages encoded)."""
        if self.unavailable_for > 0:
            self.unavailable_for -= 1
            raise BrokerUnavailableError("fake broker is down")
        self.published.append(message if isinstance(message, Envelope) else encode(message))

    async def publish_many(
        self, envelopes: Sequence[Envelope], timeout_s: float | None = None
    ) -> list[BaseException | None]:
        return await publish_side_by_side(self.publish, envelopes, timeout_s)


@dataclass
class FakeDeadLetterQueue:
    """A quorum DLQ that counts deliveries: each letter looked at and given back is one
    more, and a letter given back more than `delivery_limit` times is dropped, as
    RabbitMQ 4 does (its default is 20 for a queue declared without a limit)."""

    safe_to_scan: bool = True
    delivery_limit: int | None = None
    letters: list[Envelope] = field(default_factory=list)
    returns: dict[str, int] = field(default_factory=dict)
    looks: int = 0

    async def publish(self, envelope: Envelope) -> None:
        self.letters.append(envelope)

    async def peek_dead_letters(self, limit: int) -> list[DeadLetter]:
        seen: list[DeadLetter] = []

        async def look(letter: DeadLetter) -> bool:
            seen.append(letter)
            return False

        await self.settle_dead_letters(look, limit)
        return seen

    async def settle_dead_letters(
        self, decide: Callable[[DeadLetter], Awaitable[bool]], limit: int
    ) -> None:
        kept: list[Envelope] = []
        for n, envelope in enumerate(self.letters):
            if n >= limit:
                kept.append(envelope)
                continue
            self.looks += 1
            letter = describe_dead_letter(envelope.message_id, envelope.body, envelope.headers)
            if await decide(letter):
                continue
            returned = self.returns[envelope.message_id] = (
                self.returns.get(envelope.message_id, 0) + 1
            )
            if self.delivery_limit is None or returned <= self.delivery_limit:
                kept.append(envelope)
        self.letters = kept

    async def purge_dead_letters(self) -> int:
        purged = len(self.letters)
        self.letters.clear()
        return purged


@dataclass
class FakeDispatcher:
    dispatched: list[Envelope] = field(default_factory=list)

    async def dispatch(self, messages: Sequence[Outgoing | Envelope]) -> None:
        """Messages (the worker's) or envelopes (AfterCommit's, encoded already)."""
        self.dispatched.extend(
            message if isinstance(message, Envelope) else encode(message) for message in messages
        )

    async def dispatch_each(self, commits: Sequence[Sequence[Outgoing | Envelope]]) -> None:
        for messages in commits:
            await self.dispatch(messages)


def make_job(**overrides: Any) -> Job:
    values: dict[str, Any] = {
        "id": JobId(uuid.uuid4()),
        "type": "demo.echo",
        "queue": "jobs.default",
        "tenant_id": TenantId("acme"),
        "payload": {"message": "hi"},
        "max_attempts": 3,
        "now": START,
    }
    values.update(overrides)
    return Job.create(**values)


class FakeTenantDirectory:
    """The tenant directory port in memory; counts lookups so caching can be seen."""

    def __init__(self) -> None:
        from jobrail.tenants.domain import ApiKeyInfo, Tenant

        self.tenants: dict[str, Tenant] = {}
        self.keys: dict[str, ApiKeyInfo] = {}  # by digest
        self.lookups = 0

    async def create_tenant(self, tenant: Any) -> None:
        from jobrail.tenants.ports import TenantExistsError

        if tenant.id in self.tenants:
            raise TenantExistsError(tenant.id)
        self.tenants[tenant.id] = tenant

    async def get_tenant(self, tenant_id: TenantId) -> Any:
        return self.tenants.get(tenant_id)

    async def list_tenants(self) -> list[Any]:
        return sorted(self.tenants.values(), key=lambda t: t.id)

    async def set_max_queued(self, tenant_id: Any, cap: int | None) -> Any:
        return self._set(tenant_id, max_queued=cap)

    async def set_weight(self, tenant_id: Any, weight: float | None) -> Any:
        return self._set(tenant_id, weight=weight)

    def _set(self, tenant_id: Any, **values: Any) -> Any:
        import dataclasses

        tenant = self.tenants.get(tenant_id)
        if tenant is None:
            return None
        self.tenants[tenant_id] = dataclasses.replace(tenant, **values)
        return self.tenants[tenant_id]

    async def add_key(self, key: Any, key_digest: str) -> None:
        from jobrail.tenants.ports import KeyExistsError

        if key_digest in self.keys:
            raise KeyExistsError(key.hint)
        self.keys[key_digest] = key

    async def revoke_key(self, key_id: uuid.UUID, at: datetime) -> Any:
        import dataclasses

        for key_digest, key in self.keys.items():
            if key.id == key_id and key.revoked_at is None:
                self.keys[key_digest] = dataclasses.replace(key, revoked_at=at)
                return self.keys[key_digest]
        return None

    async def list_keys(self, tenant_id: TenantId) -> list[Any]:
        return sorted(
            (k for k in self.keys.values() if k.tenant_id == tenant_id),
            key=lambda k: k.created_at,
        )

    async def principal_for(self, key_digest: str) -> Any:
        from jobrail.tenants.domain import Principal

        self.lookups += 1
        key = self.keys.get(key_digest)
        if key is None or key.revoked_at is not None:
            return None
        return Principal(key.tenant_id, self.tenants[key.tenant_id].admin, key.id)


class FakePauses:
    """The pauses (jobrail.jobs.ports.PauseReader) in memory: `paused` by (scope, value)."""

    def __init__(self) -> None:
        from jobrail.jobs.ports import Pause

        self.paused: dict[tuple[str, str], Pause] = {}

    async def pause_of(self, job: Any) -> Any:
        for key in (("queue", job.queue), ("type", job.type), ("tenant", job.tenant_id)):
            if key in self.paused:
                return self.paused[key]
        return None
