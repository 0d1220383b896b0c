"""Units of work over a migrated SQLite database of a test's own, for the tests of what
a context's transaction does with the jobs it enqueues."""

import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from jobrail.cli.schema import migrate
from jobrail.demo.jobs import echo
from jobrail.events.catalog import EventCatalog
from jobrail.jobs.registry import JobRegistry, JobSpec
from jobrail.outbox.uow import UnitOfWorkFactory
from jobrail.settings import Settings
from jobrail.store.engine import create_sessionmaker
from tests.fakes import FakeDispatcher, FixedClock
from tests.support.apps import REFERENCE


async def sqlite_units(
    tmp_path: Path,
    dispatcher: FakeDispatcher,
    *,
    job_types: Sequence[JobSpec] = (echo,),
    events: EventCatalog | None = None,
    **options: Any,
) -> tuple[AsyncEngine, UnitOfWorkFactory]:
    """A migrated database in `tmp_path`, its engine, and a factory of units of work
    that know `job_types` (`demo.echo`) and `events` (none); `options`: the factory's
    own, such as `enqueued`."""
    url = f"sqlite+aiosqlite:///{tmp_path}/uow.db"
    settings = Settings(database={"url": url})  # type: ignore[arg-type]
    await asyncio.to_thread(migrate, settings, REFERENCE)
    engine = create_async_engine(url)
    registry = JobRegistry(job_types, queues=["jobs.default"], default_timeout_s=30)
    factory = UnitOfWorkFactory(
        create_sessionmaker(engine),
        dispatcher,
        FixedClock(),
        events or EventCatalog([]),
        registry,
        3,
        **options,
    )
    return engine, factory
