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
"""

from jobrail.jobs.ports import StoreUnavailableError
from jobrail.persistence.dialects import upsert_insert
from jobrail.persistence.errors import database_errors
from jobrail.persistence.schema import MigrationChain, run_environment
from jobrail.persistence.tables import NAMING_CONVENTION, UtcDateTime
from jobrail.persistence.uow import SqlaUnitOfWork, UnitOfWorkFactory

__all__ = [
    "NAMING_CONVENTION",
    "MigrationChain",
    "SqlaUnitOfWork",
    "StoreUnavailableError",
    "UnitOfWorkFactory",
    "UtcDateTime",
    "database_errors",
    "run_environment",
    "upsert_insert",
]
