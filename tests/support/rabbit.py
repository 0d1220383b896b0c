"""Looking into RabbitMQ from tests: queue depths, reading the DLQ, publishing raw bytes."""

import asyncio
import contextlib
import warnings
from dataclasses import dataclass

import aio_pika

from jobrail.transport.topology import Topology
from tests.support.services import AMQP_URL

# A probe's teardown never waits longer than this on RabbitMQ (a connection that
# reconnects forever after a restart must not hold the suite).
TEARDOWN_S = 30.0


@dataclass
class DeadLetter:
    body: bytes
    headers: dict[str, object]


class RabbitProbe:
    def __init__(self, topology: Topology) -> None:
        self.topology = topology
        self._conn: aio_pika.abc.AbstractConnection | None = None

    async def __aenter__(self) -> "RabbitProbe":
        # Robust: the fault tests restart RabbitMQ under it.
        self._conn = await aio_pika.connect_robust(AMQP_URL)
        self.channel = await self._conn.channel()
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._conn is not None
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(TEARDOWN_S):
                await self._conn.close()

    async def depth(self, physical_queue: str) -> tuple[int, int]:
        """(ready messages, consumers) of a queue; a missing queue fails the channel, so
        each look gets a channel of its own."""
        assert self._conn is not None
        async with self._conn.channel() as channel:
            queue = await channel.declare_queue(physical_queue, passive=True)
            result = queue.declaration_result
            return result.message_count or 0, result.consumer_count or 0

    async def drain(self, physical_queue: str) -> list[DeadLetter]:
        queue = await self.channel.declare_queue(physical_queue, passive=True)
        messages = []
        while (message := await queue.get(no_ack=True, fail=False)) is not None:
            messages.append(DeadLetter(message.body, dict(message.headers or {})))
        return messages

    async def publish_raw(self, physical_queue: str, body: bytes) -> None:
        await self.channel.default_exchange.publish(
            aio_pika.Message(body=body, delivery_mode=aio_pika.DeliveryMode.PERSISTENT),
            routing_key=physical_queue,
        )

    async def delete_topology(self) -> None:
        await delete_topology(self.topology)


async def delete_topology(topology: Topology) -> None:
    """Delete every queue and exchange of `topology` (missing ones are no error)."""
    names = [
        *topology.queues.values(),
        topology.dead_letter_queue,
        *topology.delay_queues.values(),
    ]
    # A connection of its own: a probe's may still be reconnecting after a restart.
    async with asyncio.timeout(TEARDOWN_S):
        connection = await aio_pika.connect(AMQP_URL, timeout=TEARDOWN_S)
        async with connection, connection.channel() as channel:
            for name in names:
                await channel.queue_delete(name, if_unused=False, if_empty=False)
            for exchange in (topology.exchange, topology.delay_exchange):
                await channel.exchange_delete(exchange)


async def remove_topology(topology: Topology) -> None:
    """A test's last clean-up: delete its topology if RabbitMQ answers, and say so
    (never fail the test) if it does not."""
    try:
        await delete_topology(topology)
    except (TimeoutError, OSError, aio_pika.exceptions.AMQPError) as error:
        warnings.warn(f"queues of {topology.exchange!r} left in RabbitMQ: {error!r}", stacklevel=1)
