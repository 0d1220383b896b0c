"""The database schema: Alembic chains, the platform's first, each with its own version table.

The platform's chain ships inside the package (``store/migrations``) and records its
revision in ``jobrail_alembic_version``, so it shares a database with a host application's
own Alembic chain, which keeps Alembic's default ``alembic_version``. An application adds
chains of its own (the reference application's is the repository's ``migrations/``), named
by its modules; `jobrail migrate` runs the platform's chain and then theirs. No alembic.ini
is read: each chain's Config is built here.

jobrail 0.1 had one chain, in ``alembic_version``, for the platform's tables and the
reference contexts' together. Its revisions kept their numbers when it was split, each in
the chain that now owns its tables. A database it migrated is adopted: a chain that has no
version table yet, in a database whose ``alembic_version`` holds one of those revisions and
which has the platform's tables, is stamped at its equivalent revision and upgraded from
there. ``alembic_version`` itself is left as it was: an older jobrail started against the
database (a rollback) still finds its revision there and migrates nothing, and the chains
never read it again once their own version tables exist.

The database is shared: a host application's own Alembic chain sees jobrail's tables
there too, and its autogenerate would propose to drop them. ``exclude_jobrail_tables``
makes the ``include_object`` filter that keeps them out of its sight.
"""

import asyncio
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from sqlalchemy import MetaData, inspect, make_url, text
from sqlalchemy.engine import Connection

from jobrail.settings import DatabaseSettings, Settings, load_settings
from jobrail.store import tables
from jobrail.store.engine import create_engine
from jobrail.store.platform_schema import create_schema_sql, search_path_sql

if TYPE_CHECKING:
    from alembic.config import Config
    from alembic.runtime.environment import EnvironmentContext
    from alembic.script import ScriptDirectory

LEGACY_VERSION_TABLE = "alembic_version"
# What tells a database of jobrail 0.1 from one where a host's own chain keeps
# `alembic_version` (perhaps with revisions numbered like these).
LEGACY_TABLES = ("jobs", "outbox", "inbox")


@dataclass(frozen=True, slots=True)
class MigrationChain:
    """An Alembic script directory and the table where its revision is recorded.

    `adopts` maps revisions of jobrail 0.1's single chain to this chain's equivalent
    (None: none of its revisions had run yet). `metadata`: the tables the chain makes
    (its env.py's), so that an application's own chain in the same database leaves them
    alone (``exclude_chains``); read when that filter runs, so a MetaData whose
    tables join it as their modules are imported is complete by then."""

    name: str
    location: Path
    version_table: str
    adopts: Mapping[str, str | None] = field(default_factory=dict)
    metadata: MetaData | None = field(default=None, compare=False)


PLATFORM = MigrationChain(
    name="jobrail",
    location=Path(__file__).resolve().parent / "migrations",
    version_table="jobrail_alembic_version",
    metadata=tables.metadata,
    adopts={
        "0001": "0001",
        "0002": "0001",
        "0003": "0001",
        "0004": "0001",
        "0005": "0005",
        "0006": "0005",
        "0007": "0007",
        "0008": "0008",
        "0009": "0009",
    },
)


class MigrationError(Exception):
    """A chain that cannot run: its script directory is missing, or two chains share a
    version table."""


class SchemaNotMigratedError(RuntimeError):
    """The database is not migrated for the process about to serve on it: its message
    says why and what to run."""


def alembic_config(
    chain: MigrationChain, database_url: str | None = None, schema: str | None = None
) -> "Config":
    """The Config of `chain`, built in code (no alembic.ini); with `schema`, the chain's
    tables and version table go in that Postgres schema (the platform's, see
    persistence.platform_schema)."""
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(chain.location))
    config.set_main_option("path_separator", "os")
    config.attributes["version_table"] = chain.version_table
    if database_url is not None:
        config.attributes["database_url"] = database_url
    if schema is not None:
        config.attributes["schema"] = schema
    return config


def upgrade(database: DatabaseSettings, chains: Sequence[MigrationChain] = ()) -> None:
    """Bring the platform's chain and then each of `chains` to their heads, adopting a
    database of jobrail 0.1's single chain first."""
    from alembic import command

    ordered = _in_order(chains)
    url = database.url.get_secret_value()
    schema = database.schema_
    if schema is not None:
        asyncio.run(_refuse_platform_elsewhere(database, schema))
    for chain in ordered:
        # Only the platform's tables move to the schema: every other chain's stay in the
        # database's default schema, where a host's own chain keeps its tables too.
        config = alembic_config(chain, url, schema if chain is PLATFORM else None)
        config.attributes["pooler"] = database.pooler  # the URL's (see run_environment)
        adopted = asyncio.run(_adoptable_revision(database, chain))
        if adopted is not None:
            command.stamp(config, adopted)
        command.upgrade(config, "heads")


def _in_order(chains: Sequence[MigrationChain]) -> list[MigrationChain]:
    ordered: list[MigrationChain] = []
    for chain in (PLATFORM, *chains):
        if chain in ordered:
            continue
        if any(chain.version_table == other.version_table for other in ordered):
            raise MigrationError(
                f"migration chains {chain.name!r} and another share the version table "
                f"{chain.version_table!r}"
            )
        if not (chain.location / "env.py").is_file():
            raise MigrationError(
                f"migration chain {chain.name!r}: no Alembic environment at {chain.location}"
            )
        ordered.append(chain)
    return ordered


async def _refuse_platform_elsewhere(database: DatabaseSettings, schema: str) -> None:
    """A database migrated without the schema keeps the platform's tables in its default
    schema: migrating would make empty ones in `schema` and leave the jobs behind."""
    engine = create_engine(database.model_copy(update={"schema_": None}))
    try:
        async with engine.connect() as connection:
            elsewhere, here = await connection.run_sync(
                lambda sync: (
                    inspect(sync).has_table(PLATFORM.version_table),
                    inspect(sync).has_table(PLATFORM.version_table, schema=schema),
                )
            )
    finally:
        await engine.dispose()
    if elsewhere and not here:
        raise MigrationError(
            f"the platform's tables are in the database's default schema, not in {schema!r}: "
            f"move them there first (ALTER TABLE ... SET SCHEMA {schema} for each of them "
            f"and {PLATFORM.version_table}), or unset JOBRAIL_DATABASE__SCHEMA"
        )


async def _adoptable_revision(database: DatabaseSettings, chain: MigrationChain) -> str | None:
    # jobrail 0.1 kept every table in the default schema: a database it migrated has no
    # platform schema to adopt.
    if not chain.adopts or database.schema_ is not None:
        return None
    engine = create_engine(database)
    try:
        async with engine.connect() as connection:
            legacy = await connection.run_sync(_legacy_revision, chain.version_table)
    finally:
        await engine.dispose()
    return chain.adopts.get(legacy) if legacy is not None else None


def _legacy_revision(connection: Connection, version_table: str) -> str | None:
    """The revision of jobrail 0.1's chain in this database, if `version_table` is not
    there yet."""
    tables = set(inspect(connection).get_table_names())
    if version_table in tables or LEGACY_VERSION_TABLE not in tables:
        return None
    if not tables.issuperset(LEGACY_TABLES):
        return None
    rows = connection.execute(text(f"SELECT version_num FROM {LEGACY_VERSION_TABLE}")).all()  # noqa: S608 - a constant
    return str(rows[0][0]) if len(rows) == 1 else None


def run_environment(
    context: "EnvironmentContext", metadata: MetaData | Sequence[MetaData], version_table: str
) -> None:
    """The body of a chain's env.py: run its migrations on the connection or URL the
    Config carries (else the settings' database), recording them in its version table.

    Autogenerate looks only at the tables of `metadata`: the database holds other chains'
    tables too, which are not this chain's to drop."""
    config = context.config
    if context.is_offline_mode():
        raise SystemExit("offline migrations are not supported; run `jobrail migrate`")
    platform = version_table == PLATFORM.version_table
    version_table = config.attributes.get("version_table", version_table)
    schema: str | None = config.attributes.get("schema")
    own = _table_names(metadata)

    def include_name(name: str | None, type_: str, parent_names: Any) -> bool:
        return type_ != "table" or name in own

    def run(connection: Connection) -> None:
        if schema is not None:
            # The revisions name their tables bare: with the schema first on the search
            # path, they create them there (see persistence.platform_schema).
            connection.execute(text(create_schema_sql(schema)))
            connection.execute(text(search_path_sql(schema)))
            connection.commit()  # before the migrations, which commit on their own
        context.configure(
            connection=connection,
            target_metadata=metadata,
            version_table=version_table,
            version_table_schema=schema,
            render_as_batch=connection.dialect.name == "sqlite",
            compare_type=True,
            include_name=include_name,
        )
        with context.begin_transaction():
            context.run_migrations()

    connection = config.attributes.get("connection")
    if connection is not None:
        run(connection)
        return
    url = config.attributes.get("database_url")
    if url is not None:
        database = DatabaseSettings(url=url, pooler=config.attributes.get("pooler", "none"))
    else:
        database = load_settings().database
        if platform and "schema" not in config.attributes:
            schema = database.schema_
        database = database.model_copy(update={"schema_": None})  # run() sets it
    asyncio.run(_run_async(database, run))


async def _run_async(database: DatabaseSettings, run: Callable[[Connection], None]) -> None:
    engine = create_engine(database)
    try:
        async with engine.connect() as connection:
            await connection.run_sync(run)
            await connection.commit()
    finally:
        await engine.dispose()


def _table_names(metadata: MetaData | Sequence[MetaData]) -> set[str]:
    metadatas = [metadata] if isinstance(metadata, MetaData) else list(metadata)
    return {name for each in metadatas for name in each.tables}


def not_up_to_date(database: DatabaseSettings, chains: Sequence[MigrationChain] = ()) -> str | None:
    """Why a process should not start on `database`, if its schema is not at the heads of
    the platform's chain and `chains` (a SQLite file that is not there, a chain with no
    revision yet or an older one); None when it is. The database's own errors (it cannot
    be reached, it refuses the connection) are raised: the caller tells an outage, which a
    serving process waits out (``/ready``), from a mistake."""
    path = sqlite_path(database)
    if path is not None and not path.is_file():
        return f"the SQLite file {path} does not exist"
    current = asyncio.run(asyncio.wait_for(_revisions(database, _in_order(chains)), 10))
    for chain, revision in current:
        script = _script(chain)
        heads = tuple(script.get_heads())
        if revision is None:
            return f"chain {chain.name!r} has no revision yet (head: {', '.join(heads)})"
        if revision in heads or not _known(script, revision):
            # At its head, or ahead of this code (a newer jobrail migrated it: a rolling
            # deploy or a rollback, whose revisions only add): this code runs on it.
            continue
        return f"chain {chain.name!r} is at {revision}, not at its head {', '.join(heads)}"
    return None


def sqlite_path(database: DatabaseSettings) -> Path | None:
    """The file of a SQLite database (None: not SQLite, or in memory)."""
    if not database.is_sqlite:
        return None
    name = make_url(database.url.get_secret_value()).database
    return Path(name) if name and name != ":memory:" else None


def _script(chain: MigrationChain) -> "ScriptDirectory":
    from alembic.script import ScriptDirectory

    return ScriptDirectory(str(chain.location))


def _known(script: "ScriptDirectory", revision: str) -> bool:
    from alembic.util import CommandError

    try:
        return script.get_revision(revision) is not None
    except CommandError:
        return False


async def _revisions(
    database: DatabaseSettings, chains: Sequence[MigrationChain]
) -> list[tuple[MigrationChain, str | None]]:
    from alembic.runtime.migration import MigrationContext

    def read(connection: Connection) -> list[tuple[MigrationChain, str | None]]:
        found = []
        for chain in chains:
            schema = database.schema_ if chain is PLATFORM else None
            context = MigrationContext.configure(
                connection,
                opts={"version_table": chain.version_table, "version_table_schema": schema},
            )
            found.append((chain, context.get_current_revision()))
        return found

    engine = create_engine(database.model_copy(update={"schema_": None}))
    try:
        async with engine.connect() as connection:
            return await connection.run_sync(read)
    finally:
        await engine.dispose()


IncludeObject = Callable[[Any, str | None, str, bool, Any], bool]
"""Alembic's ``include_object``: (object, name, type_, reflected, compare_to) -> keep it."""


def exclude_chains(
    chains: Sequence[MigrationChain] = (), schema: str | None = None
) -> IncludeObject:
    """An ``include_object`` for an application's own Alembic chain in jobrail's
    database: its autogenerate (and ``alembic check``) leaves out the tables of the
    platform's chain and of `chains` (those with a ``metadata``), their indexes and
    constraints, and every chain's version table; it proposes neither to drop them nor
    to change them. Everything else, the application's own tables among them, it
    compares as before.

    `schema`: the platform's (``JOBRAIL_DATABASE__SCHEMA``). Its tables and its version
    table are then those of that schema only, and a table of the same name elsewhere (a
    ``jobs`` of the application's own in the default schema) is the application's.
    Alembic compares the default schema alone unless ``include_schemas`` is set, so there
    it never sees the platform's tables at all."""
    ordered = _in_order(chains)

    def owned(chain: MigrationChain) -> set[str]:
        names = set(chain.metadata.tables) if chain.metadata is not None else set()
        return names | {chain.version_table}

    def include_object(
        object_: Any, name: str | None, type_: str, reflected: bool, compare_to: Any
    ) -> bool:
        table = object_ if type_ == "table" else getattr(object_, "table", None)
        if table is None or not isinstance(getattr(table, "name", None), str):
            return True
        where: str | None = getattr(table, "schema", None)
        for chain in ordered:
            home = schema if chain is PLATFORM else None
            if where == home and table.name in owned(chain):
                return False
        return True

    return include_object


class MigratedApp(Protocol):
    """What ``exclude_jobrail_tables`` reads of an app's ``JobRail``."""

    @property
    def settings(self) -> Settings: ...

    @property
    def migration_chains(self) -> Sequence[MigrationChain]: ...


def exclude_jobrail_tables(rail: MigratedApp) -> IncludeObject:
    """Alembic's ``include_object`` for the ``env.py`` of an application's own chain in
    the database of `rail`, its ``JobRail`` (``context.configure(..., include_object=
    exclude_jobrail_tables(rail))``): autogenerate and ``alembic check`` leave out every
    table of the chains jobrail migrates for the rail (the platform's, and those of its
    modules and of ``JOBRAIL_MODULES`` that name their ``metadata``) and their version
    tables (``jobrail_alembic_version`` and the modules'), rather than proposing to drop
    them. With ``JOBRAIL_DATABASE__SCHEMA`` the platform's tables are those of that
    schema only (see ``exclude_chains``)."""
    return exclude_chains(rail.migration_chains, rail.settings.database.schema_)
