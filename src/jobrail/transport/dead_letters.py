"""The dead-letter queue for operators: look, let some go, purge.

`AmqpDeadLetters` reads ``jobs.dlq`` on RabbitMQ: a pass takes messages with
``basic.get`` without acknowledging them, acknowledges the ones it lets go and closes
its channel, which gives the rest back in order (see ``jobrail.transport.topology`` for
why that never drops one). `MemoryDeadLetters` is the embedded broker's list.
"""

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import AsyncGenerator, Awaitable, Callable

from aio_pika.abc import AbstractConnection, AbstractQueue

from jobrail.jobs.messages import DeadLetter
from jobrail.kernel.errors import BrokerUnavailableError
from jobrail.transport.amqp_errors import CHANNEL_GONE, why
from jobrail.transport.codec import Envelope, describe_dead_letter

Decide = Callable[[DeadLetter], Awaitable[bool]]

# How long a pass waits, after closing its channel, for RabbitMQ to have put back the
# letters it kept (a quorum queue applies the return after the channel's close-ok).
RETURNS_WAIT_S = 2.0
_RETURNS_POLL_S = 0.01


class AmqpDeadLetters:
    def __init__(self, queue: str) -> None:
        self._queue = queue
        self._connection: AbstractConnection | None = None
        self._scannable = False

    def attach(self, connection: AbstractConnection, *, scannable: bool) -> None:
        """Read the DLQ over `connection` from now on; `scannable`: it was declared with
        its explicit delivery limit (see `safe_to_scan`)."""
        self._connection, self._scannable = connection, scannable

    @property
    def safe_to_scan(self) -> bool:
        """Whether the DLQ was declared with its explicit delivery limit here (False for
        an older one kept without it: each look counts towards RabbitMQ 4's default)."""
        return self._scannable

    async def peek(self, limit: int) -> list[DeadLetter]:
        seen: list[DeadLetter] = []

        async def look(letter: DeadLetter) -> bool:
            seen.append(letter)
            return False

        await self.settle(look, limit)
        return seen

    async def settle(self, decide: Decide, limit: int) -> None:
        """Gets up to `limit` messages without acknowledging them, acknowledges those
        `decide` lets go, and closes the channel: RabbitMQ puts the rest back, in order.
        (Quorum queues count each such look as a delivery: the DLQ's delivery limit is
        set to never, see jobrail.transport.topology.)

        Only the letters waiting when it starts are looked at: one that arrives during
        the pass (a job it redrove failing again at once) is left for the next pass. It
        ends once the letters it kept are back in the queue, so that the next pass counts
        them among the waiting ones."""
        let_go = 0
        async with self._open() as queue:
            waiting = int(queue.declaration_result.message_count or 0)
            for _ in range(min(limit, waiting)):
                message = await queue.get(no_ack=False, fail=False)
                if message is None:
                    break
                letter = describe_dead_letter(
                    message.message_id or "", message.body, message.headers or {}
                )
                if await decide(letter):
                    await message.ack()
                    let_go += 1
        await self._wait_for_returns(waiting - let_go)

    async def purge(self) -> int:
        """Delete every dead letter waiting in the DLQ; return how many went."""
        async with self._open() as queue:
            purged = await queue.purge()
        return int(purged.message_count or 0)

    async def _wait_for_returns(self, expected: int) -> None:
        """Wait (at most RETURNS_WAIT_S) until at least `expected` letters are waiting.
        Fewer may stay for longer while another pass holds some: that pass puts them
        back itself."""
        if expected <= 0:
            return
        deadline = time.monotonic() + RETURNS_WAIT_S
        async with self._open() as queue:
            while int(queue.declaration_result.message_count or 0) < expected:
                if time.monotonic() >= deadline:
                    return
                await asyncio.sleep(_RETURNS_POLL_S)
                await queue.declare()

    @contextlib.asynccontextmanager
    async def _open(self) -> AsyncGenerator[AbstractQueue, None]:
        """The DLQ (declared passively, so its depth is known) on a channel of its own,
        closed afterwards; RabbitMQ being away is BrokerUnavailableError."""
        connection = self._connection
        if connection is None or connection.is_closed:
            raise BrokerUnavailableError("not connected to RabbitMQ")
        try:
            async with connection.channel() as channel:
                yield await channel.get_queue(self._queue, ensure=True)
        except CHANNEL_GONE as exc:
            raise BrokerUnavailableError(f"dead-letter queue: {why(exc)}") from exc


class MemoryDeadLetters:
    """Dead letters in memory, oldest first; the oldest go when `capacity` is reached."""

    def __init__(self, queue: str, capacity: int = 1000) -> None:
        self.queue = queue
        self._letters: deque[Envelope] = deque(maxlen=capacity)

    def __len__(self) -> int:
        return len(self._letters)

    def append(self, envelope: Envelope) -> None:
        self._letters.append(envelope)

    async def peek(self, limit: int) -> list[DeadLetter]:
        return [_describe(envelope) for envelope in list(self._letters)[:limit]]

    async def settle(self, decide: Decide, limit: int) -> None:
        looked = list(self._letters)[:limit]
        gone = {id(envelope) for envelope in looked if await decide(_describe(envelope))}
        kept = [envelope for envelope in self._letters if id(envelope) not in gone]
        self._letters.clear()
        self._letters.extend(kept)

    async def purge(self) -> int:
        purged = len(self._letters)
        self._letters.clear()
        return purged


def _describe(envelope: Envelope) -> DeadLetter:
    return describe_dead_letter(envelope.message_id, envelope.body, envelope.headers)
