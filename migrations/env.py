"""Alembic environment of the reference application's chain: the tables of billing,
notifications and sync (see contexts.schema). `jobrail migrate` runs it after the
platform's chain."""

from alembic import context

import contexts.billing.adapters.persistence
import contexts.notifications.adapters.persistence
import contexts.sync.adapters.persistence  # noqa: F401 - their tables join the metadata
from contexts.schema import SCHEMA, metadata
from jobrail.persistence.schema import run_environment

run_environment(context, metadata, SCHEMA.version_table)
