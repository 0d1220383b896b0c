"""The dispatcher's store on SQLite and Postgres alike, for the contract tests: an
engine on emptied tables, the intake each dialect's enqueues go through, and held jobs."""

from collections import Counter
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine, async_sessionmaker

from jobrail.dispatch.ports import Line
from jobrail.dispatch.use_cases import JobDispatcher
from jobrail.jobs.domain import Job
from jobrail.jobs.messages import JobMessage
from jobrail.kernel.ids import JobId, TenantId
from jobrail.settings import DatabaseSettings, DispatchSettings
from jobrail.store.dispatch import SqlaDispatchStore
from jobrail.store.jobs import SqlaJobIntake
from jobrail.store.pg_intake import PgJobIntake
from jobrail.store.pg_pool import create_pool
from jobrail.store.tables import dispatch_pauses
from jobrail.transport.codec import encode
from tests.fakes import NO_TYPES, START, FixedClock, make_job
from tests.support.services import store_engine

QUEUE = "jobs.default"
TABLES = (
    "jobs, outbox, dispatch_queues, dispatch_gates, dispatch_arrivals, dispatch_pauses, "
    "tenants CASCADE"
)


class Subject:
    def __init__(self, engine: AsyncEngine, add: Any) -> None:
        self.engine, self.add = engine, add
        self.store = SqlaDispatchStore(engine)

    async def count(self, table: Any, *where: Any) -> int:
        async with self.engine.connect() as conn:
            return int(await conn.scalar(select(func.count()).select_from(table).where(*where)))


@pytest.fixture(params=["sqlite", "postgres"])
async def subject(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Subject]:
    engine = await store_engine(request, tmp_path, TABLES)
    pool = None
    if request.param == "sqlite":
        intake: Any = SqlaJobIntake(async_sessionmaker(engine))
    else:
        pool = await create_pool(DatabaseSettings(url=engine.url.render_as_string(False)))
        intake = PgJobIntake(pool)

    async def add(job: Job) -> Job:
        message = JobMessage.of(job)
        return await intake.add(job, encode(message))  # type: ignore[no-any-return]

    yield Subject(engine, add)
    if pool is not None:
        await pool.close()
    async with engine.begin() as conn:  # a pause left behind would stop every later claim
        await conn.execute(dispatch_pauses.delete())
    await engine.dispose()


def held(tenant: str = "acme", **overrides: Any) -> Job:
    job = make_job(tenant_id=TenantId(tenant), **overrides)
    job.hold()
    return job


class ReadyCount:
    """The ready gauge, saying what the test sets."""

    def __init__(self, count: int) -> None:
        self.count = count

    async def ready(self, queue: str) -> int:
        return self.count


class CountingStore(SqlaDispatchStore):
    """The store, counting its passes per queue, its looks for what moved, and the lines
    whose heads its passes read."""

    def __init__(self, engine: AsyncEngine) -> None:
        super().__init__(engine)
        self.passes: Counter[str] = Counter()
        self.looks = 0
        self.line_reads = 0

    @asynccontextmanager
    async def turn(
        self, queue: str, holder: str, now: datetime, lease: timedelta
    ) -> AsyncIterator[Any]:
        self.passes[queue] += 1
        async with super().turn(queue, holder, now, lease) as turn:
            if turn is not None:
                heads = turn.heads

                async def counted(wants: Mapping[Line, int]) -> dict[Line, list[JobId]]:
                    self.line_reads += len(wants)
                    return await heads(wants)

                turn.heads = counted  # type: ignore[method-assign]
            yield turn

    async def stirs(self, queues: Sequence[str], since: datetime, now: datetime) -> Any:
        self.looks += 1
        return await super().stirs(queues, since, now)


class SentMessages:
    """The sender, keeping what a dispatcher released, in order."""

    def __init__(self) -> None:
        self.messages: list[JobMessage] = []

    async def send(self, messages: Sequence[JobMessage]) -> Sequence[BaseException | None]:
        self.messages.extend(messages)
        return [None] * len(messages)


def make_dispatcher(
    subject: Subject, gauge: ReadyCount, sender: SentMessages, ready_target: int
) -> JobDispatcher:
    settings = DispatchSettings(enabled=True, ready_target=ready_target)
    return JobDispatcher(
        subject.store, gauge, sender, NO_TYPES, FixedClock(START), settings, [QUEUE], "me"
    )
