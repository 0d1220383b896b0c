"""Looking at a migrated database: its tables, and how it differs from the tables in code."""

import asyncio

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import MetaData, inspect
from sqlalchemy.ext.asyncio import create_async_engine

PLATFORM_TABLES = {
    "jobs",
    "flows",
    "outbox",
    "inbox",
    "tenants",
    "api_keys",
    "ops_sessions",
    "job_events",
    "webhooks",
    "webhook_relay",
    "dispatch_queues",
    "dispatch_arrivals",
    "dispatch_pauses",
    "dispatch_gates",
    "workers",
    "ops_samples",
    "job_attempt_failures",
}


def _not_a_version_table(name: str | None, type_: str, parent_names: object) -> bool:
    return type_ != "table" or not (name or "").endswith("alembic_version")


def differences(url: str, *metadatas: MetaData) -> list[object]:
    """What autogenerate would change to make the database match `metadatas`, the chains'
    version tables aside."""

    async def run() -> list[object]:
        engine = create_async_engine(url)
        async with engine.connect() as conn:
            diff = await conn.run_sync(
                lambda sync: compare_metadata(
                    MigrationContext.configure(sync, opts={"include_name": _not_a_version_table}),
                    list(metadatas),
                )
            )
        await engine.dispose()
        return list(diff)

    return asyncio.run(run())


def tables(url: str) -> set[str]:
    async def run() -> set[str]:
        engine = create_async_engine(url)
        async with engine.connect() as conn:
            names = await conn.run_sync(lambda sync: inspect(sync).get_table_names())
        await engine.dispose()
        return set(names)

    return asyncio.run(run())


def platform_head() -> str:
    """The revision the platform's chain ends at, in this code."""
    from jobrail.store.schema import PLATFORM

    return _head(PLATFORM.location)


def contexts_head() -> str:
    """The revision the reference contexts' chain (``migrations/``) ends at, in this code."""
    from contexts.schema import SCHEMA

    return _head(SCHEMA.location)


def _head(location: object) -> str:
    from alembic.script import ScriptDirectory

    head = ScriptDirectory(str(location)).get_current_head()
    assert head is not None
    return head
