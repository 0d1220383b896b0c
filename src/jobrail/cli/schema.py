"""The database schema, as the command sees it: `jobrail migrate` (the platform's Alembic
chain, then the modules'), its answer, and the check that stops a serving process on a
database that is not migrated for its modules.

A database that cannot be reached, refuses the connection or is ahead of this code is an
expected failure: one line and exit 1, never a traceback.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

# Nothing of jobrail is imported here (see jobrail.cli).
if TYPE_CHECKING:
    from jobrail.modules import Module
    from jobrail.settings import Settings
    from jobrail.store.schema import MigrationChain


def migrate(settings: Settings, modules: Sequence[Module] = ()) -> None:
    """The platform's Alembic chain, then the chains the modules name: those of the
    settings, then `modules` (see jobrail.store.schema). A chain two modules
    name runs once."""
    from jobrail.store.schema import sqlite_path, upgrade

    path = sqlite_path(settings.database)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
    upgrade(settings.database, _chains(settings, modules))


def _chains(settings: Settings, modules: Sequence[Module]) -> list[MigrationChain]:
    """The Alembic chains the modules of the settings, then `modules`, name."""
    from jobrail.runtime.modules import load_modules

    loaded = [*load_modules(settings.modules), *modules]
    return [chain for module in loaded for chain in module.migrations]


def _migrate_or_exit(
    settings: Settings, modules: Sequence[Module] = (), *, create_database: bool = False
) -> None:
    """`migrate` for a command (creating a Postgres database first if asked): an expected
    failure (a module that does not load, a database that cannot be reached or is ahead
    of this code) is one line and exit 1."""
    from alembic.util import CommandError

    from jobrail.kernel.errors import StoreUnavailableError
    from jobrail.runtime.modules import ModuleLoadError
    from jobrail.store.errors import database_errors
    from jobrail.store.schema import MigrationError

    try:
        with database_errors():
            if create_database and not settings.database.is_sqlite:
                from jobrail.store.admin import create_database_if_missing

                url = settings.database.url.get_secret_value()
                asyncio.run(create_database_if_missing(url))
            migrate(settings, modules)
    except StoreUnavailableError as exc:
        print(f"jobrail: cannot migrate the database: {exc}", file=sys.stderr)
        raise SystemExit(1) from None
    except (ModuleLoadError, MigrationError, CommandError) as exc:
        print(f"jobrail: cannot migrate the database: {exc}", file=sys.stderr)
        raise SystemExit(1) from None
    except Exception as exc:
        refusal = _connection_refused(exc)
        if refusal is None:
            raise
        print(f"jobrail: cannot migrate the database: {refusal}", file=sys.stderr)
        raise SystemExit(1) from None


def _up_to_date(settings: Settings, modules: Sequence[Module]) -> str:
    """`jobrail migrate`'s answer once it has migrated: the database, without the user,
    password or options of its URL, and the revision of each chain, its head now."""
    from alembic.script import ScriptDirectory
    from sqlalchemy import URL, make_url

    from jobrail.store.schema import PLATFORM

    chains: list[MigrationChain] = []
    for chain in (PLATFORM, *_chains(settings, modules)):
        if chain not in chains:  # as `upgrade` runs them: the platform's first, each once
            chains.append(chain)
    revisions = ", ".join(
        f"{chain.name} {'+'.join(ScriptDirectory(str(chain.location)).get_heads())}"
        for chain in chains
    )
    url = make_url(settings.database.url.get_secret_value())
    shown = URL.create(url.drivername, host=url.host, port=url.port, database=url.database)
    return f"jobrail: database {shown.render_as_string()} is up to date ({revisions})"


def _check_schema_or_exit(settings: Settings, modules: Sequence[Module], app: str | None) -> None:
    """A serving process on a database that is not migrated for its modules (or a SQLite
    file that is not there) stops here in one line, exit 1, rather than with a traceback
    from its first query."""
    from jobrail.store.schema import MigrationError, not_up_to_date

    chains = _chains(settings, modules)  # a module that does not load: main's one line
    try:
        problem = not_up_to_date(settings.database, chains)
    except MigrationError as exc:
        problem = str(exc)
    except Exception as exc:  # noqa: BLE001 - the database's own error, told apart below
        # Refused (no such database, role or password): a mistake. Unreachable: an outage
        # the process waits out, as it does one that starts later.
        refusal = _connection_refused(exc)
        if refusal is not None:
            print(f"jobrail: cannot use the database: {refusal}", file=sys.stderr)
            raise SystemExit(1) from None
        return
    if problem is not None:
        command = "jobrail migrate" + (f" --app {app}" if app else "")
        print(
            f"jobrail: the database is not migrated: {problem} (run `{command}`)",
            file=sys.stderr,
        )
        raise SystemExit(1)


def _connection_refused(error: BaseException) -> str | None:
    """Why the database refused the connection, if it did: Postgres has no such database,
    role or password, or the SQLite file is not a database (asyncpg's or sqlite3's error
    is the cause of SQLAlchemy's). A mistake to fix, not an outage to wait out."""
    import sqlite3

    import asyncpg

    refusals = (asyncpg.InvalidCatalogNameError, asyncpg.InvalidAuthorizationSpecificationError)
    cause: BaseException | None = error
    while cause is not None:
        # The base class only: its subclass OperationalError includes a locked database.
        if type(cause) is sqlite3.DatabaseError:
            return f"the SQLite file is not a usable database ({cause})"
        if isinstance(cause, refusals):
            hint = " (`jobrail migrate --create-database` creates it)"
            return f"{cause}{hint if isinstance(cause, asyncpg.InvalidCatalogNameError) else ''}"
        cause = cause.__cause__
    return None
