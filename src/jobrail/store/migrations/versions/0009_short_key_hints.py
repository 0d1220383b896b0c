"""api keys: cut hints stored by the old rule that could show a chosen key whole

Before this revision a hint was a key's first 9 characters, the whole of a chosen key
of 9 characters or fewer (the embedded mode's ``demo-key``). Hints are now at most a
quarter of their key (jobrail.tenants.domain.hint). The keys themselves are not
stored, so their length is unknown here: a hint in the shape of a generated key's
(``jr_`` and 6 characters, from a 46-character key, which the new rule gives the same
hint) is kept, and any other is cut to the first 2 characters, a quarter of the
shortest key allowed.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-01
"""

import re
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

GENERATED = re.compile(r"jr_[A-Za-z0-9_-]{6}…")
ELLIPSIS = "…"


def upgrade() -> None:
    bind = op.get_bind()
    rows = bind.execute(sa.text("SELECT id, hint FROM api_keys")).all()
    for key_id, hint in rows:
        if GENERATED.fullmatch(hint):
            continue
        shown = hint.removesuffix(ELLIPSIS)[:2] + ELLIPSIS
        if shown != hint:
            bind.execute(
                sa.text("UPDATE api_keys SET hint = :hint WHERE id = :id"),
                {"hint": shown, "id": key_id},
            )


def downgrade() -> None:
    # What was cut is gone; the shorter hints are valid under the old code too.
    pass
