"""The reference contexts' tables: their own metadata and their own Alembic chain.

The chain is the repository's ``migrations/``, recorded in ``contexts_alembic_version``;
`jobrail migrate` runs it after the platform's chain, because each context's module names
it. Its revisions kept their numbers from jobrail 0.1's single chain, which it adopts
(see jobrail.store.schema). The contexts are never installed: they run from the
source tree (in the image too, infra/Dockerfile), beside ``migrations/``.
"""

from pathlib import Path

from sqlalchemy import MetaData

from jobrail.sql import NAMING_CONVENTION, MigrationChain

metadata = MetaData(naming_convention=NAMING_CONVENTION)


SCHEMA = MigrationChain(
    name="contexts",
    location=Path(__file__).resolve().parents[1] / "migrations",
    version_table="contexts_alembic_version",
    metadata=metadata,  # what an application's own chain leaves alone (jobrail.sql)
    adopts={
        "0001": None,
        "0002": "0002",
        "0003": "0003",
        "0004": "0004",
        "0005": "0004",
        "0006": "0006",
        "0007": "0006",
        "0008": "0006",
        "0009": "0006",
    },
)
