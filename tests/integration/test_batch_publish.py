"""A batch published in one write, each message with its own confirm
(jobrail.transport.internals), on the real RabbitMQ. These tests also fail on an
aiormq upgrade that changes the channel internals the batch uses."""

import asyncio
from collections.abc import AsyncIterator

import aio_pika
import aiormq
import pytest
from aiormq import spec

from jobrail.settings import Settings
from jobrail.transport import frames
from jobrail.transport.internals import Outbound, publish_batch
from jobrail.transport.publishing import publish_confirmed
from tests.support.rabbit import RabbitProbe


@pytest.fixture
async def channel(
    stack_settings: Settings, rabbit: RabbitProbe
) -> AsyncIterator[tuple[aiormq.abc.AbstractChannel, aio_pika.abc.AbstractQueue]]:
    """A confirming channel (returns raise, as the platform's publisher opens it), and an
    exclusive queue on the default exchange."""
    connection = await aio_pika.connect_robust(
        stack_settings.rabbit.url.get_secret_value(),
        connection_class=frames.CoalescingRobustConnection,
    )
    try:
        opened = await connection.channel(publisher_confirms=True, on_return_raises=True)
        queue = await opened.declare_queue(exclusive=True)
        yield await opened.get_underlay_channel(), queue
    finally:
        await connection.close()


def _message(n: int, routing_key: str, exchange: str = "") -> Outbound:
    return Outbound(
        f"m{n}".encode(),
        exchange,
        routing_key,
        spec.Basic.Properties(delivery_mode=2, message_id=f"batch-{n}"),
    )


async def _received(queue: aio_pika.abc.AbstractQueue, count: int) -> list[str]:
    bodies: list[str] = []
    async with asyncio.timeout(10), queue.iterator() as messages:
        async for message in messages:
            bodies.append(message.body.decode())
            await message.ack()
            if len(bodies) == count:
                break
    return bodies


async def test_a_batch_is_confirmed_message_by_message_and_arrives_in_order(
    channel: tuple[aiormq.abc.AbstractChannel, aio_pika.abc.AbstractQueue],
) -> None:
    underlay, queue = channel

    outcomes = await publish_batch(underlay, [_message(n, queue.name) for n in range(40)], 10)

    assert outcomes == [None] * 40
    assert await _received(queue, 40) == [f"m{n}" for n in range(40)]
    assert not underlay.confirmations  # type: ignore[attr-defined]  # nothing left waiting


async def test_a_returned_message_fails_alone(
    channel: tuple[aiormq.abc.AbstractChannel, aio_pika.abc.AbstractQueue],
) -> None:
    underlay, queue = channel
    batch = [_message(0, queue.name), _message(1, "no.such.queue"), _message(2, queue.name)]

    outcomes = await publish_batch(underlay, batch, 10)

    assert outcomes[0] is None
    assert outcomes[2] is None
    assert isinstance(outcomes[1], aiormq.exceptions.PublishError)
    assert await _received(queue, 2) == ["m0", "m2"]


async def test_batches_and_single_publishes_share_a_channel(
    channel: tuple[aiormq.abc.AbstractChannel, aio_pika.abc.AbstractQueue],
) -> None:
    """Delivery tags stay consistent when the batch and aiormq's own publish interleave."""
    underlay, queue = channel

    async def single(n: int) -> None:
        await publish_confirmed(
            underlay, f"s{n}".encode(), "", queue.name, spec.Basic.Properties(message_id=f"s{n}")
        )

    results = await asyncio.gather(
        *(single(n) for n in range(10)),
        publish_batch(underlay, [_message(n, queue.name) for n in range(10)], 10),
        *(single(n) for n in range(10, 20)),
        publish_batch(underlay, [_message(n, queue.name) for n in range(10, 20)], 10),
    )

    assert results[10] == [None] * 10
    assert results[21] == [None] * 10
    received = await _received(queue, 40)
    assert sorted(received) == sorted([f"s{n}" for n in range(20)] + [f"m{n}" for n in range(20)])


async def test_past_its_deadline_each_unconfirmed_message_says_so_and_the_channel_goes_on(
    channel: tuple[aiormq.abc.AbstractChannel, aio_pika.abc.AbstractQueue],
) -> None:
    underlay, queue = channel

    late = await publish_batch(underlay, [_message(n, queue.name) for n in range(5)], 0)
    on_time = await publish_batch(underlay, [_message(n, queue.name) for n in range(5, 8)], 10)

    assert all(isinstance(outcome, TimeoutError) for outcome in late)
    assert on_time == [None] * 3
    # The late ones were published all the same (their confirms came after the deadline).
    assert sorted(await _received(queue, 8)) == [f"m{n}" for n in range(8)]


async def test_a_channel_the_broker_closes_fails_the_batch_instead_of_hanging(
    channel: tuple[aiormq.abc.AbstractChannel, aio_pika.abc.AbstractQueue],
) -> None:
    underlay, queue = channel
    batch = [_message(0, queue.name), _message(1, queue.name, exchange="no.such.exchange")]

    outcomes = await publish_batch(underlay, batch, 10)  # the broker closes the channel

    assert outcomes[1] is not None
    with pytest.raises(aiormq.exceptions.ChannelInvalidStateError):
        await publish_batch(underlay, [_message(2, queue.name)], 10)


async def test_a_message_without_an_id_is_refused_before_anything_is_published(
    channel: tuple[aiormq.abc.AbstractChannel, aio_pika.abc.AbstractQueue],
) -> None:
    underlay, queue = channel
    nameless = Outbound(b"x", "", queue.name, spec.Basic.Properties())

    with pytest.raises(ValueError, match="message id"):
        await publish_batch(underlay, [_message(0, queue.name), nameless], 10)

    assert await publish_batch(underlay, [_message(1, queue.name)], 10) == [None]
    assert await _received(queue, 1) == ["m1"]
