import json
from datetime import timedelta
from typing import Any

import pytest
from pydantic import BaseModel

from jobrail.jobs.cancel import CancelJob, CancelJobCommand
from jobrail.jobs.domain import JobStatus
from jobrail.jobs.enqueue import EnqueueJob, EnqueueJobCommand
from jobrail.jobs.get import GetJob, GetJobQuery
from jobrail.jobs.listing import ListJobs, ListJobsQuery
from jobrail.jobs.registry import JobRegistry, job
from jobrail.jobs.workflows import Workflows
from jobrail.kernel.errors import ConflictError, InvalidInputError, NotFoundError
from jobrail.kernel.ids import TenantId
from jobrail.ops.redrive import RedriveJob, RedriveJobCommand
from jobrail.outbox.committing import intake_units
from jobrail.settings import RabbitSettings
from jobrail.transport.embedded_broker import EmbeddedJobBroker
from tests.fakes import (
    NO_TYPES,
    FakeDispatcher,
    FakeJobIntake,
    FakePauses,
    FakeUnitOfWork,
    FixedClock,
)

ACME = TenantId("acme")
GLOBEX = TenantId("globex")


class Greeting(BaseModel):
    name: str


@job("test.greet", payload=Greeting, queue="jobs.high", max_attempts=4)
async def greet(payload: Greeting, ctx: object) -> dict[str, str]:
    return {"hello": payload.name}


@pytest.fixture
def registry() -> JobRegistry:
    return JobRegistry([greet], queues=["jobs.default", "jobs.high"], default_timeout_s=10)


@pytest.fixture
def uow() -> FakeUnitOfWork:
    return FakeUnitOfWork()


@pytest.fixture
def clock() -> FixedClock:
    return FixedClock()


@pytest.fixture
def dispatcher() -> FakeDispatcher:
    return FakeDispatcher()


@pytest.fixture
def enqueue(
    uow: FakeUnitOfWork, registry: JobRegistry, clock: FixedClock, dispatcher: FakeDispatcher
) -> EnqueueJob:
    units = intake_units(FakeJobIntake(uow.store), dispatcher)
    return EnqueueJob(units, registry, clock, default_max_attempts=5)


def greet_cmd(**overrides: object) -> EnqueueJobCommand:
    values: dict[str, object] = {"tenant_id": ACME, "type": "test.greet", "payload": {"name": "a"}}
    values.update(overrides)
    return EnqueueJobCommand(**values)  # type: ignore[arg-type]


async def test_enqueue_stores_the_job_and_then_publishes_its_message(
    enqueue: EnqueueJob, uow: FakeUnitOfWork, dispatcher: FakeDispatcher
) -> None:
    result = await enqueue(greet_cmd())

    assert result.created
    stored = uow.store[result.job.id]
    assert stored.status is JobStatus.PENDING
    assert stored.queue == "jobs.high"
    assert stored.max_attempts == 4
    assert stored.tenant_id == ACME
    [message] = dispatcher.dispatched
    assert message.queue == "jobs.high"
    body = json.loads(message.body)
    assert body["task_name"] == "test.greet"
    assert body["kwargs"] == {"job_id": str(result.job.id)}
    assert body["labels"]["tenant_id"] == "acme"


async def test_the_payload_is_stored_as_validated(enqueue: EnqueueJob, uow: FakeUnitOfWork) -> None:
    result = await enqueue(greet_cmd(payload={"name": "a"}))

    assert uow.store[result.job.id].payload == {"name": "a"}


async def test_a_payload_given_as_its_job_types_model_is_stored_as_it_dumps(
    enqueue: EnqueueJob, uow: FakeUnitOfWork
) -> None:
    result = await enqueue(greet_cmd(payload=Greeting(name="b")))

    assert uow.store[result.job.id].payload == {"name": "b"}


class NotAGreeting(BaseModel):
    name: int


async def test_a_payload_given_as_another_model_is_refused_and_nothing_is_written(
    enqueue: EnqueueJob, uow: FakeUnitOfWork, dispatcher: FakeDispatcher
) -> None:
    with pytest.raises(InvalidInputError, match="is a Greeting or a mapping, not a NotAGreeting"):
        await enqueue(greet_cmd(payload=NotAGreeting(name=3)))

    assert uow.store == {}
    assert dispatcher.dispatched == []


async def test_an_invalid_payload_is_refused_and_nothing_is_written(
    enqueue: EnqueueJob, uow: FakeUnitOfWork, dispatcher: FakeDispatcher
) -> None:
    with pytest.raises(InvalidInputError) as caught:
        await enqueue(greet_cmd(payload={"name": 3}))

    assert caught.value.details[0]["loc"] == ["name"]
    assert uow.store == {}
    assert dispatcher.dispatched == []


async def test_an_unknown_job_type_is_refused(enqueue: EnqueueJob, uow: FakeUnitOfWork) -> None:
    with pytest.raises(InvalidInputError, match="unknown job type"):
        await enqueue(greet_cmd(type="test.nope"))
    assert uow.store == {}


async def test_the_same_idempotency_key_returns_the_same_job_and_publishes_nothing_new(
    enqueue: EnqueueJob, uow: FakeUnitOfWork, dispatcher: FakeDispatcher
) -> None:
    first = await enqueue(greet_cmd(idempotency_key="k1"))
    second = await enqueue(greet_cmd(idempotency_key="k1"))

    assert not second.created
    assert second.job.id == first.job.id
    assert len(uow.store) == 1
    assert len(dispatcher.dispatched) == 1


async def test_idempotency_keys_are_per_tenant(
    enqueue: EnqueueJob, dispatcher: FakeDispatcher
) -> None:
    first = await enqueue(greet_cmd(idempotency_key="k1"))
    other = await enqueue(greet_cmd(idempotency_key="k1", tenant_id=GLOBEX))

    assert other.created
    assert other.job.id != first.job.id
    assert len(dispatcher.dispatched) == 2


async def test_a_key_reused_for_a_different_request_is_a_conflict(
    enqueue: EnqueueJob, dispatcher: FakeDispatcher
) -> None:
    await enqueue(greet_cmd(idempotency_key="k1"))

    with pytest.raises(ConflictError, match="different request"):
        await enqueue(greet_cmd(idempotency_key="k1", payload={"name": "b"}))
    assert len(dispatcher.dispatched) == 1


async def test_a_delayed_job_carries_its_due_time_to_the_message(
    enqueue: EnqueueJob, uow: FakeUnitOfWork, clock: FixedClock, dispatcher: FakeDispatcher
) -> None:
    due = clock.now() + timedelta(minutes=5)

    result = await enqueue(greet_cmd(run_after=due))

    assert uow.store[result.job.id].run_after == due
    assert dispatcher.dispatched[0].not_before == due


class NoLines:
    """No job is held (fair dispatch off): no line is ever read."""

    async def place_of(self, job: Any) -> Any:
        raise AssertionError(f"the line of {job.id} read, which is not held")


async def test_get_hides_other_tenants_jobs(enqueue: EnqueueJob, uow: FakeUnitOfWork) -> None:
    created = await enqueue(greet_cmd())
    get = GetJob(uow, FakePauses(), NoLines(), FixedClock())

    assert (await get(GetJobQuery(ACME, created.job.id))).id == created.job.id
    with pytest.raises(NotFoundError):
        await get(GetJobQuery(GLOBEX, created.job.id))


async def test_a_waiting_job_says_which_pause_holds_it_and_a_finished_one_does_not(
    enqueue: EnqueueJob, uow: FakeUnitOfWork, clock: FixedClock
) -> None:
    from jobrail.jobs.ports import Pause

    created = await enqueue(greet_cmd())
    pauses = FakePauses()
    pause = Pause("tenant", str(ACME), clock.now())
    pauses.paused[("tenant", str(ACME))] = pause
    get = GetJob(uow, pauses, NoLines(), clock)

    job = await get(GetJobQuery(ACME, created.job.id))
    standing = await get.standing_of(job)
    assert standing is not None
    assert (standing.reason, standing.pause) == ("paused", pause)
    job.cancel(clock.now())
    assert await get.standing_of(job) is None


async def test_list_pages_newest_first_and_filters(
    enqueue: EnqueueJob, uow: FakeUnitOfWork, clock: FixedClock
) -> None:
    ids = []
    for i in range(5):
        clock.advance(timedelta(seconds=1))
        ids.append((await enqueue(greet_cmd(entity_id=f"e{i % 2}"))).job.id)
    await enqueue(greet_cmd(tenant_id=GLOBEX))
    list_jobs = ListJobs(uow)

    first = await list_jobs(ListJobsQuery(ACME, limit=2))
    assert [j.id for j in first.items] == ids[:-3:-1]
    assert first.next_cursor is not None
    rest = await list_jobs(ListJobsQuery(ACME, limit=10, after=first.next_cursor))
    assert [j.id for j in rest.items] == ids[2::-1]
    assert rest.next_cursor is None

    by_entity = await list_jobs(ListJobsQuery(ACME, entity_id="e1"))
    assert [j.id for j in by_entity.items] == [ids[3], ids[1]]
    assert (await list_jobs(ListJobsQuery(ACME, status=JobStatus.RUNNING))).items == []


async def test_list_refuses_page_sizes_out_of_range(uow: FakeUnitOfWork) -> None:
    with pytest.raises(InvalidInputError, match="limit"):
        await ListJobs(uow)(ListJobsQuery(ACME, limit=0))


async def test_cancel_of_a_pending_job_is_immediate(
    enqueue: EnqueueJob, uow: FakeUnitOfWork, clock: FixedClock
) -> None:
    created = await enqueue(greet_cmd())

    job = await _cancel(uow, clock)(CancelJobCommand(ACME, created.job.id))

    assert job.status is JobStatus.CANCELLED
    assert uow.store[created.job.id].status is JobStatus.CANCELLED


async def test_cancel_of_a_running_job_only_requests_it(
    enqueue: EnqueueJob, uow: FakeUnitOfWork, clock: FixedClock
) -> None:
    created = await enqueue(greet_cmd())
    uow.store[created.job.id].start(clock.now(), timedelta(seconds=30))

    job = await _cancel(uow, clock)(CancelJobCommand(ACME, created.job.id))

    assert job.status is JobStatus.RUNNING
    assert uow.store[created.job.id].cancel_requested


async def test_cancel_of_another_tenants_job_is_not_found(
    enqueue: EnqueueJob, uow: FakeUnitOfWork, clock: FixedClock
) -> None:
    created = await enqueue(greet_cmd())

    with pytest.raises(NotFoundError):
        await _cancel(uow, clock)(CancelJobCommand(GLOBEX, created.job.id))
    assert uow.store[created.job.id].status is JobStatus.PENDING


async def test_redrive_resets_a_failed_job_and_publishes_it_again(
    enqueue: EnqueueJob, uow: FakeUnitOfWork, clock: FixedClock
) -> None:
    created = await enqueue(greet_cmd())
    stored = uow.store[created.job.id]
    stored.start(clock.now(), timedelta(seconds=30))
    stored.fail("boom", clock.now())

    dlq = EmbeddedJobBroker(RabbitSettings())
    job = (await RedriveJob(uow, clock, dlq, NO_TYPES)(RedriveJobCommand(ACME, created.job.id))).job

    assert job.status is JobStatus.PENDING
    assert uow.store[created.job.id].attempts == 0
    [again] = uow.published
    assert json.loads(again.body)["kwargs"]["job_id"] == str(created.job.id)


async def test_redrive_of_a_pending_job_is_a_conflict_and_publishes_nothing(
    enqueue: EnqueueJob, uow: FakeUnitOfWork, clock: FixedClock
) -> None:
    created = await enqueue(greet_cmd())

    dlq = EmbeddedJobBroker(RabbitSettings())
    with pytest.raises(ConflictError):
        await RedriveJob(uow, clock, dlq, NO_TYPES)(RedriveJobCommand(ACME, created.job.id))
    assert uow.published == []


def _cancel(uow: FakeUnitOfWork, clock: FixedClock) -> CancelJob:
    return CancelJob(uow, clock, Workflows(NO_TYPES, clock, 3))
