"""The one unit of work (``outbox.committing.UnitOfWork``): whoever commits, its commit
hands the committer what its intake recorded, and leaving it ends the committer, with
or without an error, which it does not swallow."""

import pytest

from jobrail.jobs.domain import Job
from jobrail.jobs.messages import JobMessage
from jobrail.kernel.ids import JobId
from jobrail.outbox.committing import Recorder, RecordingIntake, UnitOfWork
from tests.fakes import FakeJobIntake, make_job


class Committer:
    def __init__(self) -> None:
        self.taken: list[tuple[int, list[str]]] = []
        self.ended = 0

    async def commit(self, recorded: Recorder) -> None:
        envelopes, created = recorded.take()
        self.taken.append((len(envelopes), list(created)))

    async def end(self) -> None:
        self.ended += 1


async def test_a_commit_hands_over_what_the_intake_recorded_and_leaving_ends_it() -> None:
    committer = Committer()
    store: dict[JobId, Job] = {}
    job = make_job()
    replay = make_job(idempotency_key="k")

    async with UnitOfWork(RecordingIntake(FakeJobIntake(store)), committer) as uow:
        await uow.intake.add(job, JobMessage.of(job))
        await uow.intake.add(replay, JobMessage.of(replay))
        await uow.intake.add(make_job(idempotency_key="k"), JobMessage.of(replay))  # a replay
        await uow.commit()
        assert committer.ended == 0

    assert committer.taken == [(2, ["demo.echo", "demo.echo"])]  # the replay is not new
    assert committer.ended == 1


async def test_leaving_on_an_error_ends_the_unit_without_a_commit_and_raises_it() -> None:
    committer = Committer()
    job = make_job()

    async def use_case() -> None:
        async with UnitOfWork(RecordingIntake(FakeJobIntake({})), committer) as uow:
            await uow.intake.add(job, JobMessage.of(job))
            raise RuntimeError("use case failed")

    with pytest.raises(RuntimeError, match="use case failed"):
        await use_case()

    assert committer.taken == []
    assert committer.ended == 1
