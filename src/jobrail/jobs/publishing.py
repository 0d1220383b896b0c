"""Ports of publishing after the commit: the publisher that hands a message to the broker,
the dispatcher of the outbox's fast path, and the marks of rows it published. Adapters
live in transport/, outbox/ and store/.
"""

from collections.abc import Sequence
from datetime import datetime
from typing import Any, Protocol

from jobrail.jobs.messages import Outgoing


class Publisher(Protocol):
    async def publish(self, message: Outgoing) -> None:
        """Publish and wait for the broker's confirmation; raise BrokerUnavailableError."""
        ...


class OutboxDispatcher(Protocol):
    async def dispatch(self, messages: Sequence[Outgoing]) -> None:
        """Publish just-committed outbox messages and mark them published. Never raises:
        whatever it cannot publish now, the relay publishes later."""
        ...

    async def dispatch_each(self, commits: Sequence[Sequence[Outgoing]]) -> None:
        """`dispatch` for the messages of several commits at once: the commits side by
        side, each one's messages in order (as separate `dispatch` calls would). Never
        raises."""
        ...


class OutboxMarks(Protocol):
    async def mark_published(self, ids: Sequence[Any], at: datetime) -> None: ...
