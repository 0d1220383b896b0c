"""Public: what a module's SQLAlchemy adapters use.

- ``SqlaUnitOfWork``: the base of a module's unit of work (one transaction, rolled
  back unless committed; jobs and events it records leave after the commit), and
  ``UnitOfWorkFactory``, which opens them on the platform's database.
- ``UtcDateTime``: a timestamp column type that stores and returns aware UTC times,
  on Postgres and SQLite alike.
- ``NAMING_CONVENTION``: constraint names for a module's ``MetaData``, so Alembic's
  autogenerate names them as the platform's own tables do.
- ``database_errors``: a context manager that turns a database that cannot be
  reached into ``StoreUnavailableError`` (a job is retried, a route answers 503).
- ``upsert_insert``: an ``INSERT`` that supports ``ON CONFLICT``, for the session's
  dialect (Postgres or SQLite).
- ``MigrationChain``: a module's Alembic chain, run by ``jobrail migrate``, and
  ``run_environment``, the body of that chain's ``env.py`` (its version table, the
  database ``jobrail migrate`` names).
- ``exclude_jobrail_tables``: for an application's own Alembic chain in jobrail's
  database, the ``include_object`` that keeps jobrail's tables out of its autogenerate.
"""

from jobrail.kernel.errors import StoreUnavailableError
from jobrail.outbox.uow import SqlaUnitOfWork, UnitOfWorkFactory
from jobrail.store.dialects import upsert_insert
from jobrail.store.errors import database_errors
from jobrail.store.schema import (
    IncludeObject,
    MigrationChain,
    exclude_jobrail_tables,
    run_environment,
)
from jobrail.store.tables import NAMING_CONVENTION, UtcDateTime

__all__ = [
    "NAMING_CONVENTION",
    "IncludeObject",
    "MigrationChain",
    "SqlaUnitOfWork",
    "StoreUnavailableError",
    "UnitOfWorkFactory",
    "UtcDateTime",
    "database_errors",
    "exclude_jobrail_tables",
    "run_environment",
    "upsert_insert",
]
