"""Alembic environment of the reference application's chain: the tables of every context
(see contexts.schema). `jobrail migrate` runs it after the platform's chain."""

import importlib
from pathlib import Path

from alembic import context

import contexts
from contexts.schema import SCHEMA, metadata
from jobrail.sql import run_environment

# Each context's tables join the metadata when its persistence adapter is imported: a
# context added to contexts/ (with adapters/persistence.py) is found without an edit.
for adapter in sorted(Path(contexts.__file__).parent.glob("*/adapters/persistence.py")):
    importlib.import_module(f"contexts.{adapter.parents[1].name}.adapters.persistence")

run_environment(context, metadata, SCHEMA.version_table)
