"""Batches and chains over the fakes: which member's end releases or stops what, exact
counts, callbacks released once, and what cancel, growth and redrive do."""

from datetime import timedelta

import pytest
from pydantic import BaseModel

from jobrail.jobs.domain import FlowRole, Job, JobStatus
from jobrail.jobs.flow import FlowStatus
from jobrail.jobs.flow_service import FlowService
from jobrail.jobs.ports import ClaimToken
from jobrail.jobs.registry import JobRegistry, job
from jobrail.jobs.workflows import BatchCommand, ChainCommand, FlowJob, FlowStarted, Workflows
from jobrail.kernel.errors import ConflictError, InvalidInputError
from jobrail.kernel.ids import JobId, TenantId
from jobrail.ops.redrive import RedriveJob, RedriveJobCommand
from jobrail.worker.flow_recording import FlowRecordingStore
from tests.fakes import FakeDeadLetterQueue, FakeJobStore, FakeUnitOfWork, FixedClock

ACME = TenantId("acme")
LEASE = timedelta(seconds=30)


class Step(BaseModel):
    n: int


@job("test.step", payload=Step, queue="jobs.default")
async def step(payload: Step, ctx: object) -> dict[str, int]:
    return {"n": payload.n}


class World:
    """A unit of work's committed state, the flows over it, and a worker's store that
    records through FlowRecordingStore as the runner does."""

    def __init__(self) -> None:
        self.clock = FixedClock()
        self.uow = FakeUnitOfWork()
        catalog = self.catalog = JobRegistry([step], queues=["jobs.default"], default_timeout_s=10)
        self.workflows = Workflows(catalog, self.clock, default_max_attempts=3)
        self.flows = FlowService(lambda: self.uow, self.workflows)
        self.store = FlowRecordingStore(
            FakeJobStore(jobs=self.uow.store), lambda: self.uow, self.workflows
        )

    def job(self, job_id: JobId) -> Job:
        return self.uow.store[job_id]

    async def end(self, job_id: JobId, status: JobStatus) -> bool:
        """Claim the job and record it ended so, as a worker would."""
        claimed = await self.store.claim(job_id, self.clock.now(), LEASE)
        assert claimed.job is not None, f"{job_id} was not claimable"
        running = claimed.job
        token = ClaimToken.of(running)
        if status is JobStatus.SUCCEEDED:
            running.succeed({"n": running.payload["n"]}, self.clock.now())
        elif status is JobStatus.FAILED:
            running.fail("broken", self.clock.now())
        else:
            running.stop_cancelled(self.clock.now())
        self.clock.advance(timedelta(milliseconds=1))
        return await self.store.record(running, token, ())


def batch(n: int, **callbacks: FlowJob) -> BatchCommand:
    return BatchCommand(
        tenant_id=ACME, jobs=[FlowJob("test.step", {"n": i}) for i in range(n)], **callbacks
    )


CALLBACKS = {
    "then": FlowJob("test.step", {"n": 100}),
    "catch": FlowJob("test.step", {"n": 101}),
    "finally_": FlowJob("test.step", {"n": 102}),
}


@pytest.fixture
def world() -> World:
    return World()


def roles(started: FlowStarted) -> dict[FlowRole, JobId]:
    return {role: job.id for role, job in started.callbacks.items()}


async def test_a_batch_releases_then_and_finally_once_every_member_succeeded(
    world: World,
) -> None:
    started = await world.flows.batch(batch(3, **CALLBACKS))
    cb = roles(started)
    assert {world.job(j).status for j in cb.values()} == {JobStatus.BLOCKED}
    assert len(world.uow.published) == 3  # the members' messages only

    for member in started.members[:2]:
        assert await world.end(member.id, JobStatus.SUCCEEDED)
    assert world.job(cb[FlowRole.THEN]).status is JobStatus.BLOCKED
    assert await world.end(started.members[2].id, JobStatus.SUCCEEDED)

    assert world.job(cb[FlowRole.THEN]).status is JobStatus.PENDING
    assert world.job(cb[FlowRole.FINALLY]).status is JobStatus.PENDING
    catch = world.job(cb[FlowRole.CATCH])
    assert catch.status is JobStatus.CANCELLED
    assert catch.last_error == "no job of the batch failed"
    assert len(world.uow.published) == 5  # + then and finally, once each
    view = await world.flows.get(ACME, started.flow.id)
    assert view.flow.status is FlowStatus.SUCCEEDED
    assert (view.counts.total, view.counts.succeeded, view.counts.pending) == (3, 3, 0)


async def test_catch_runs_at_the_first_failure_and_then_is_cancelled_at_the_end(
    world: World,
) -> None:
    started = await world.flows.batch(batch(3, **CALLBACKS))
    cb = roles(started)

    await world.end(started.members[0].id, JobStatus.FAILED)
    assert world.job(cb[FlowRole.CATCH]).status is JobStatus.PENDING
    await world.end(started.members[1].id, JobStatus.FAILED)  # not a second catch
    assert world.job(cb[FlowRole.THEN]).status is JobStatus.BLOCKED
    await world.end(started.members[2].id, JobStatus.SUCCEEDED)

    then = world.job(cb[FlowRole.THEN])
    assert then.status is JobStatus.CANCELLED
    assert then.last_error == "not every job of the batch succeeded (2 failed, 0 cancelled)"
    assert world.job(cb[FlowRole.FINALLY]).status is JobStatus.PENDING
    assert world.uow.flow_store[started.flow.id].status is FlowStatus.FAILED


async def test_a_member_end_recorded_twice_counts_once(world: World) -> None:
    started = await world.flows.batch(batch(2, then=CALLBACKS["then"]))
    member = started.members[0]
    claimed = await world.store.claim(member.id, world.clock.now(), LEASE)
    assert claimed.job is not None
    token = ClaimToken.of(claimed.job)
    claimed.job.succeed({"n": 0}, world.clock.now())

    assert await world.store.record(claimed.job, token, ())
    assert not await world.store.record(claimed.job, token, ())  # a duplicate delivery's

    flow = world.uow.flow_store[started.flow.id]
    assert (flow.succeeded, flow.failed, flow.cancelled) == (1, 0, 0)
    assert world.job(roles(started)[FlowRole.THEN]).status is JobStatus.BLOCKED


async def test_a_chain_runs_its_steps_in_order_and_stops_at_a_failure(world: World) -> None:
    started = await world.flows.chain(
        ChainCommand(tenant_id=ACME, steps=[FlowJob("test.step", {"n": i}) for i in range(4)])
    )
    steps = [member.id for member in started.members]
    assert [world.job(s).status for s in steps] == [
        JobStatus.PENDING,
        JobStatus.BLOCKED,
        JobStatus.BLOCKED,
        JobStatus.BLOCKED,
    ]
    assert len(world.uow.published) == 1

    await world.end(steps[0], JobStatus.SUCCEEDED)
    assert world.job(steps[1]).status is JobStatus.PENDING
    assert world.job(steps[2]).status is JobStatus.BLOCKED
    await world.end(steps[1], JobStatus.FAILED)

    for later in steps[2:]:
        stopped = world.job(later)
        assert stopped.status is JobStatus.CANCELLED
        # Numbered as the API numbers it (`flow.step`, from 0): the second step.
        assert stopped.last_error == "chain stopped: step 1 was failed"
    flow = world.uow.flow_store[started.flow.id]
    assert flow.status is FlowStatus.FAILED
    assert (flow.succeeded, flow.failed, flow.cancelled) == (1, 1, 2)
    assert len(world.uow.published) == 2


async def test_cancelling_a_batch_cancels_what_has_not_started_and_runs_finally(
    world: World,
) -> None:
    started = await world.flows.batch(batch(3, **CALLBACKS))
    running = await world.store.claim(started.members[0].id, world.clock.now(), LEASE)
    assert running.job is not None

    view = await world.flows.cancel(ACME, started.flow.id)

    assert view.counts.cancelled == 2
    assert view.counts.running == 1
    assert world.job(started.members[0].id).cancel_requested
    assert world.job(roles(started)[FlowRole.FINALLY]).status is JobStatus.BLOCKED
    # The running member stops at its checkpoint: the batch ends, finally runs.
    token = ClaimToken.of(running.job)
    running.job.stop_cancelled(world.clock.now())
    assert await world.store.record(running.job, token, ())
    assert world.job(roles(started)[FlowRole.FINALLY]).status is JobStatus.PENDING
    assert world.job(roles(started)[FlowRole.THEN]).status is JobStatus.CANCELLED
    assert world.uow.flow_store[started.flow.id].status is FlowStatus.CANCELLED
    with pytest.raises(ConflictError):
        await world.flows.add_to_batch(ACME, started.flow.id, [FlowJob("test.step", {"n": 9})])


async def test_a_running_batch_takes_more_jobs_and_waits_for_them(world: World) -> None:
    started = await world.flows.batch(batch(1, then=CALLBACKS["then"]))
    added = await world.flows.add_to_batch(
        ACME, started.flow.id, [FlowJob("test.step", {"n": 7}), FlowJob("test.step", {"n": 8})]
    )
    assert [job.flow.step for job in added if job.flow] == [1, 2]

    await world.end(started.members[0].id, JobStatus.SUCCEEDED)
    await world.end(added[0].id, JobStatus.SUCCEEDED)
    assert world.job(roles(started)[FlowRole.THEN]).status is JobStatus.BLOCKED
    await world.end(added[1].id, JobStatus.SUCCEEDED)
    assert world.job(roles(started)[FlowRole.THEN]).status is JobStatus.PENDING
    assert world.uow.flow_store[started.flow.id].total == 3


def keyed(command: BatchCommand, key: str = "month-end") -> BatchCommand:
    return BatchCommand(
        tenant_id=command.tenant_id,
        jobs=command.jobs,
        then=command.then,
        catch=command.catch,
        finally_=command.finally_,
        idempotency_key=key,
        name=command.name,
    )


async def test_an_idempotency_key_replays_the_same_batch_even_after_it_grew(
    world: World,
) -> None:
    started = await world.flows.batch(keyed(batch(2, then=CALLBACKS["then"])))
    world.clock.advance(timedelta(seconds=1))
    added = await world.flows.add_to_batch(ACME, started.flow.id, [FlowJob("test.step", {"n": 7})])

    again = await world.flows.batch(keyed(batch(2, then=CALLBACKS["then"])))

    assert again.created is False
    assert again.flow.id == started.flow.id
    assert [j.id for j in again.members] == [*(j.id for j in started.members), added[0].id]
    assert again.callbacks[FlowRole.THEN].id == started.callbacks[FlowRole.THEN].id
    assert len(world.uow.store) == 2 + 1 + 1


async def test_an_idempotency_key_replays_a_batch_grown_by_a_host_whose_clock_is_behind(
    world: World,
) -> None:
    started = await world.flows.batch(keyed(batch(2, then=CALLBACKS["then"])))
    world.clock.advance(timedelta(seconds=-5))  # the worker that adds to it
    await world.flows.add_to_batch(ACME, started.flow.id, [FlowJob("test.step", {"n": 7})])
    world.clock.advance(timedelta(seconds=10))

    again = await world.flows.batch(keyed(batch(2, then=CALLBACKS["then"])))

    assert (again.created, again.flow.id) == (False, started.flow.id)
    with pytest.raises(ConflictError, match="different request"):
        await world.flows.batch(keyed(batch(3, then=CALLBACKS["then"])))


async def test_an_idempotency_key_replays_a_batch_some_of_whose_jobs_were_pruned(
    world: World,
) -> None:
    started = await world.flows.batch(keyed(batch(3, then=CALLBACKS["then"])))
    del world.uow.store[started.members[0].id]  # finished long ago, and deleted
    del world.uow.store[started.callbacks[FlowRole.THEN].id]

    again = await world.flows.batch(keyed(batch(3, then=CALLBACKS["then"])))

    assert (again.created, again.flow.id) == (False, started.flow.id)
    with pytest.raises(ConflictError, match="different request"):
        # The pruned `then` can no longer be compared, but its role still is.
        await world.flows.batch(keyed(batch(3, catch=CALLBACKS["then"])))
    with pytest.raises(ConflictError, match="different request"):
        await world.flows.batch(keyed(batch(2, then=CALLBACKS["then"])))


@pytest.mark.parametrize(
    "other",
    [
        batch(3, then=CALLBACKS["then"]),  # one job more
        batch(1, then=CALLBACKS["then"]),  # one job less
        BatchCommand(  # another payload
            tenant_id=ACME,
            jobs=[FlowJob("test.step", {"n": 0}), FlowJob("test.step", {"n": 5})],
            then=CALLBACKS["then"],
        ),
        BatchCommand(  # another entity
            tenant_id=ACME,
            jobs=[FlowJob("test.step", {"n": 0}), FlowJob("test.step", {"n": 1}, "inv-1")],
            then=CALLBACKS["then"],
        ),
        batch(2),  # no callback
        batch(2, then=FlowJob("test.step", {"n": 101})),  # another callback
        batch(2, catch=CALLBACKS["then"]),  # the callback in another role
        BatchCommand(  # another name
            tenant_id=ACME,
            jobs=batch(2).jobs,
            then=CALLBACKS["then"],
            name="renamed",
        ),
    ],
)
async def test_an_idempotency_key_reused_for_another_batch_is_a_conflict(
    world: World, other: BatchCommand
) -> None:
    started = await world.flows.batch(keyed(batch(2, then=CALLBACKS["then"])))
    jobs_before = dict(world.uow.store)

    with pytest.raises(ConflictError, match="already used for a different request"):
        await world.flows.batch(keyed(other))

    assert world.uow.store == jobs_before
    assert list(world.uow.flow_store) == [started.flow.id]


async def test_an_idempotency_key_reused_for_another_chain_is_a_conflict(world: World) -> None:
    steps = [FlowJob("test.step", {"n": i}) for i in range(3)]
    first = await world.flows.chain(ChainCommand(ACME, steps, idempotency_key="k"))
    same = await world.flows.chain(ChainCommand(ACME, steps, idempotency_key="k"))
    assert (same.created, same.flow.id) == (False, first.flow.id)
    with pytest.raises(ConflictError, match="already used for a different request"):
        await world.flows.chain(ChainCommand(ACME, steps[::-1], idempotency_key="k"))
    with pytest.raises(ConflictError, match="already used for a chain"):
        await world.flows.batch(BatchCommand(ACME, steps, idempotency_key="k"))


async def test_a_flow_with_a_bad_job_writes_nothing(world: World) -> None:
    with pytest.raises(InvalidInputError, match="unknown job type 'nope'"):
        await world.flows.batch(
            BatchCommand(tenant_id=ACME, jobs=[FlowJob("test.step", {"n": 1}), FlowJob("nope", {})])
        )
    with pytest.raises(InvalidInputError, match="at least one job"):
        await world.flows.batch(BatchCommand(tenant_id=ACME, jobs=[]))
    with pytest.raises(InvalidInputError):
        await world.flows.batch(batch(2, then=FlowJob("test.step", {"n": "x"})))
    assert world.uow.store == {}
    assert world.uow.flow_store == {}


async def test_a_callback_ending_is_not_counted_as_a_member(world: World) -> None:
    started = await world.flows.batch(batch(1, then=CALLBACKS["then"]))
    await world.end(started.members[0].id, JobStatus.SUCCEEDED)

    assert await world.end(roles(started)[FlowRole.THEN], JobStatus.FAILED)

    flow = world.uow.flow_store[started.flow.id]
    assert (flow.succeeded, flow.failed, flow.status) == (1, 0, FlowStatus.SUCCEEDED)


async def test_a_redriven_member_reopens_its_batch_without_firing_callbacks_again(
    world: World,
) -> None:
    started = await world.flows.batch(batch(2, **CALLBACKS))
    cb = roles(started)
    await world.end(started.members[0].id, JobStatus.SUCCEEDED)
    await world.end(started.members[1].id, JobStatus.FAILED)
    assert world.uow.flow_store[started.flow.id].status is FlowStatus.FAILED
    released = len(world.uow.published)

    redrive = RedriveJob(world.uow, world.clock, FakeDeadLetterQueue(), world.catalog)
    await redrive(RedriveJobCommand(ACME, started.members[1].id, clear_dead_letters=False))
    flow = world.uow.flow_store[started.flow.id]
    assert (flow.status, flow.failed, flow.succeeded) == (FlowStatus.RUNNING, 0, 1)

    await world.end(started.members[1].id, JobStatus.SUCCEEDED)
    flow = world.uow.flow_store[started.flow.id]
    assert (flow.status, flow.succeeded) == (FlowStatus.SUCCEEDED, 2)
    # then was cancelled at the first end and stays so; catch and finally ran once.
    assert world.job(cb[FlowRole.THEN]).status is JobStatus.CANCELLED
    assert len(world.uow.published) == released + 1  # the redriven member's message only
