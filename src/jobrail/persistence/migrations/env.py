"""Alembic environment of the platform's chain (see jobrail.persistence.schema)."""

from alembic import context

from jobrail.persistence.schema import PLATFORM, run_environment
from jobrail.persistence.tables import metadata

run_environment(context, metadata, PLATFORM.version_table)
