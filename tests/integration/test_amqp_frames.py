"""AMQP frames written in one event-loop turn go out in one write (jobrail.messaging.frames),
on the real RabbitMQ."""

import asyncio
from collections.abc import AsyncIterator

import aio_pika
import pytest
from aiormq import spec

from jobrail.messaging import frames
from jobrail.messaging.brokers import AmqpJobBroker
from jobrail.messaging.codec import Envelope
from jobrail.messaging.publishing import publish_confirmed
from jobrail.settings import Settings
from tests.support.rabbit import RabbitProbe


@pytest.fixture
def writes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The number of frames each write of a coalescing connection sent."""
    counted: list[int] = []
    flush = frames._CoalescingWriter._flush

    def counting(self: frames._CoalescingWriter) -> None:
        if self._pending:
            counted.append(len(self._pending))
        flush(self)

    monkeypatch.setattr(frames._CoalescingWriter, "_flush", counting)
    return counted


@pytest.fixture
async def connection(
    stack_settings: Settings, rabbit: RabbitProbe
) -> AsyncIterator[aio_pika.abc.AbstractRobustConnection]:
    connection = await aio_pika.connect_robust(
        stack_settings.rabbit.url.get_secret_value(),
        connection_class=frames.CoalescingRobustConnection,
    )
    yield connection
    await connection.close()


async def test_publishes_made_together_go_out_in_fewer_writes_and_arrive_whole(
    connection: aio_pika.abc.AbstractRobustConnection, writes: list[int]
) -> None:
    channel = await connection.channel()  # with publisher confirms
    queue = await channel.declare_queue(exclusive=True)
    underlay = await channel.get_underlay_channel()
    writes.clear()

    # As the platform publishes (jobrail.messaging.publishing), each awaiting its confirm.
    await asyncio.gather(
        *(
            publish_confirmed(underlay, f"m{n}".encode(), "", queue.name, spec.Basic.Properties())
            for n in range(50)
        )
    )

    # Every publish went through the coalescing writer (aio-pika handed aiormq the
    # transport factory), and publishes made in one turn shared a write.
    assert sum(writes) >= 50
    assert len(writes) < 50
    received = []
    async with queue.iterator() as messages:
        async for message in messages:
            received.append(message.body.decode())
            await message.ack()
            if len(received) == 50:
                break
    assert sorted(received) == sorted(f"m{n}" for n in range(50))


async def test_frames_keep_their_order_within_a_write(
    connection: aio_pika.abc.AbstractRobustConnection, writes: list[int]
) -> None:
    channel = await connection.channel()
    queue = await channel.declare_queue(exclusive=True)
    underlay = await channel.get_underlay_channel()
    writes.clear()

    # Started in this order, in one turn: their frames share writes, in this order.
    await asyncio.gather(
        *(
            publish_confirmed(underlay, f"{n}".encode(), "", queue.name, spec.Basic.Properties())
            for n in range(20)
        )
    )
    assert max(writes) > 1

    received = []
    async with queue.iterator() as messages:
        async for message in messages:
            received.append(int(message.body))
            await message.ack()
            if len(received) == 20:
                break
    assert received == list(range(20))


async def test_the_broker_publishes_through_coalesced_writes(
    stack_settings: Settings, rabbit: RabbitProbe, writes: list[int]
) -> None:
    broker = AmqpJobBroker(stack_settings.rabbit)
    await broker.startup()
    try:
        await asyncio.gather(
            *(broker.publish(Envelope(queue="jobs.io", body=f"m{n}".encode())) for n in range(30))
        )
    finally:
        await broker.shutdown()

    assert sum(writes) >= 30  # the publishes' frames, and the connection's own
    arrived = await rabbit.drain(rabbit.topology.queues["jobs.io"])
    assert sorted(m.body for m in arrived) == sorted(f"m{n}".encode() for n in range(30))
