"""AMQP frames written in one event-loop turn go out in one write (jobrail.transport.frames),
on the real RabbitMQ."""

import asyncio
from collections.abc import AsyncIterator

import aio_pika
import pytest
from aiormq import spec

from jobrail.settings import Settings
from jobrail.transport import frames
from jobrail.transport.amqp_broker import AmqpJobBroker
from jobrail.transport.codec import Envelope
from jobrail.transport.publishing import publish_confirmed
from tests.support.rabbit import TEARDOWN_S, RabbitProbe


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
    async with asyncio.timeout(TEARDOWN_S):
        await connection.close()


async def _publish_and_receive(
    connection: aio_pika.abc.AbstractRobustConnection, writes: list[int], count: int
) -> tuple[list[int], list[str]]:
    """Publish `count` messages together as the platform does (jobrail.transport.publishing:
    each awaits its confirm), started in order in one turn; return the frames of each
    write the publishing made, and the bodies that arrive, in arrival order."""
    channel = await connection.channel()  # with publisher confirms
    queue = await channel.declare_queue(exclusive=True)
    underlay = await channel.get_underlay_channel()
    writes.clear()
    await asyncio.gather(
        *(
            publish_confirmed(underlay, f"{n}".encode(), "", queue.name, spec.Basic.Properties())
            for n in range(count)
        )
    )
    publishing = list(writes)
    received: list[str] = []
    async with queue.iterator() as messages:
        async for message in messages:
            received.append(message.body.decode())
            await message.ack()
            if len(received) == count:
                break
    return publishing, received


async def test_publishes_made_together_go_out_in_fewer_writes_and_arrive_whole(
    connection: aio_pika.abc.AbstractRobustConnection, writes: list[int]
) -> None:
    publishing, received = await _publish_and_receive(connection, writes, 50)

    # Every publish went through the coalescing writer (aio-pika handed aiormq the
    # transport factory), and publishes made in one turn shared a write.
    assert sum(publishing) >= 50
    assert len(publishing) < 50
    assert sorted(received) == sorted(f"{n}" for n in range(50))


async def test_frames_keep_their_order_within_a_write(
    connection: aio_pika.abc.AbstractRobustConnection, writes: list[int]
) -> None:
    publishing, received = await _publish_and_receive(connection, writes, 20)

    assert max(publishing) > 1  # frames shared writes...
    assert received == [f"{n}" for n in range(20)]  # ...in the order they were written


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
