"""Alembic environment of the platform's chain (see jobrail.store.schema)."""

from alembic import context

from jobrail.store.schema import PLATFORM, run_environment
from jobrail.store.tables import metadata

run_environment(context, metadata, PLATFORM.version_table)
