"""jobrail 0.1's single Alembic chain, the platform's tables and the reference contexts'
together in `alembic_version`, kept as it was to make the databases it migrated (see
tests/integration/test_schema_chains.py)."""

from alembic import context

from contexts.schema import metadata as contexts_metadata
from jobrail.store.schema import LEGACY_VERSION_TABLE, run_environment
from jobrail.store.tables import metadata

run_environment(context, [metadata, contexts_metadata], LEGACY_VERSION_TABLE)
