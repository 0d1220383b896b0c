"""A host application's own Alembic chain, in Alembic's default `alembic_version`: how a
host keeps its tables beside jobrail's in one database."""

from collections.abc import Mapping
from pathlib import Path

from alembic.config import Config

HOST_ENV = """
import asyncio

from alembic import context
from sqlalchemy.ext.asyncio import create_async_engine


def run(connection):
    context.configure(connection=connection, target_metadata=None)
    with context.begin_transaction():
        context.run_migrations()


async def main():
    engine = create_async_engine(context.config.get_main_option("sqlalchemy.url"))
    async with engine.connect() as connection:
        await connection.run_sync(run)
        await connection.commit()
    await engine.dispose()


asyncio.run(main())
"""

# The host numbers its revisions as jobrail does: its "0001" is not jobrail 0.1's.
HOST_REVISION = """
import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade():
    op.create_table(
        "orders",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("job_id", sa.String(36)),
    )


def downgrade():
    op.drop_table("orders")
"""


def host_config(tmp_path: Path, url: str, revisions: Mapping[str, str] | None = None) -> Config:
    """The host's chain under `tmp_path`: `revisions` (file name: source), by default
    one revision that creates its ``orders``."""
    scripts = tmp_path / "host_migrations"
    if not scripts.exists():
        (scripts / "versions").mkdir(parents=True)
        (scripts / "env.py").write_text(HOST_ENV)
        for name, source in (revisions or {"0001_orders.py": HOST_REVISION}).items():
            (scripts / "versions" / name).write_text(source)
    config = Config()
    config.set_main_option("script_location", str(scripts))
    config.set_main_option("path_separator", "os")
    config.set_main_option("sqlalchemy.url", url)
    return config
