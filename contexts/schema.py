"""The reference contexts' tables: their own metadata and their own Alembic chain.

The chain is the repository's ``migrations/``, recorded in ``contexts_alembic_version``;
`jobrail migrate` runs it after the platform's chain, because each context's module names
it. Its revisions kept their numbers from jobrail 0.1's single chain, which it adopts
(see jobrail.persistence.schema). Where the contexts are installed rather than run from
the source tree (the image, infra/Dockerfile), the chain is ``migrations/`` in the
working directory.
"""

from pathlib import Path

from sqlalchemy import MetaData

from jobrail.persistence.schema import MigrationChain
from jobrail.persistence.tables import NAMING_CONVENTION

metadata = MetaData(naming_convention=NAMING_CONVENTION)


def _location() -> Path:
    source_tree = Path(__file__).resolve().parents[1] / "migrations"
    return source_tree if source_tree.is_dir() else Path.cwd() / "migrations"


SCHEMA = MigrationChain(
    name="contexts",
    location=_location(),
    version_table="contexts_alembic_version",
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
