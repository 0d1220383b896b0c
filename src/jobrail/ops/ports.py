"""Ports of the ops room: the dead-letter queue operators look at and take messages out
of. Adapter: the job broker (``transport/brokers.py``, over ``transport/dead_letters.py``).
"""

from collections.abc import Awaitable, Callable
from typing import Protocol

from jobrail.jobs.messages import DeadLetter


class DeadLetterQueue(Protocol):
    """The dead-letter queue, for operators: look at it, and take messages out of it."""

    @property
    def safe_to_scan(self) -> bool:
        """Whether going through the dead letters can never drop one. Each letter looked
        at and given back counts as a delivery on a quorum queue; only a DLQ declared
        with its explicit delivery limit (or one that counts none) never drops for that.
        False for an older DLQ kept without it, and before the DLQ was declared."""
        ...

    async def peek_dead_letters(self, limit: int) -> list[DeadLetter]:
        """Up to `limit` dead letters, oldest first, left where they are."""
        ...

    async def settle_dead_letters(
        self, decide: Callable[[DeadLetter], Awaitable[bool]], limit: int
    ) -> None:
        """Go through up to `limit` dead letters, oldest first: each for which
        `decide` returns True leaves the queue, the others stay."""
        ...

    async def purge_dead_letters(self) -> int:
        """Delete every dead letter waiting in the queue; return how many went."""
        ...
