"""Rows of the outbox table: what a transaction writes beside its change, for the
relay or the fast path to publish (jobrail.outbox)."""

from collections.abc import Sequence
from typing import Any

from sqlalchemy import insert
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

from jobrail.store.platform_schema import qualified
from jobrail.store.tables import outbox
from jobrail.transport.codec import Envelope


def outbox_row(envelope: Envelope, now: Any) -> dict[str, Any]:
    return {
        "id": envelope.id,
        "queue": envelope.queue,
        "body": envelope.body,
        "headers": dict(envelope.headers),
        "not_before": envelope.not_before,
        "created_at": now,
    }


async def insert_outbox_rows(
    conn: AsyncConnection | AsyncSession,
    envelopes: Sequence[Envelope],
    now: Any,
    schema: str | None = None,
) -> None:
    await conn.execute(
        insert(outbox),
        [outbox_row(e, now) for e in envelopes],
        execution_options=qualified(schema),
    )
