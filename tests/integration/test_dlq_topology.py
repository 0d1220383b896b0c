"""The dead-letter queue on this machine's RabbitMQ: declared with a delivery limit that
never drops a dead letter however often operators look, and an older DLQ declared
without one is used as it is (an upgrade) instead of failing the start-up."""

import logging
from collections.abc import AsyncIterator
from typing import Any

import aio_pika
import aiormq
import pytest

from jobrail.settings import Settings
from jobrail.transport.amqp_broker import AmqpJobBroker
from jobrail.transport.topology import DEAD_LETTER_DELIVERY_LIMIT
from tests.support.rabbit import RabbitProbe
from tests.support.services import AMQP_URL

LOOKS = 25  # more than RabbitMQ 4's default delivery limit of 20


@pytest.fixture
async def broker(stack_settings: Settings, rabbit: RabbitProbe) -> AsyncIterator[AmqpJobBroker]:
    broker = AmqpJobBroker(stack_settings.rabbit)
    await broker.startup()
    yield broker
    await broker.shutdown()


async def _declare(name: str, arguments: dict[str, object]) -> None:
    """Declare `name` again with `arguments`: RabbitMQ accepts it only if they are the
    queue's own (a way to read a queue's arguments back without the management API)."""
    connection = await aio_pika.connect(AMQP_URL)
    async with connection, connection.channel() as channel:
        await channel.declare_queue(name, durable=True, arguments=arguments)


async def test_the_dlq_has_an_explicit_delivery_limit_of_never(
    broker: AmqpJobBroker, rabbit: RabbitProbe
) -> None:
    dlq = rabbit.topology.dead_letter_queue
    assert broker.safe_to_scan  # a redrive may look through it to tidy up

    await _declare(dlq, {"x-queue-type": "quorum", "x-delivery-limit": DEAD_LETTER_DELIVERY_LIMIT})
    # What an older jobrail declared, and RabbitMQ 4's default limit, are both refused.
    for other in ({"x-queue-type": "quorum"}, {"x-queue-type": "quorum", "x-delivery-limit": 20}):
        with pytest.raises(aiormq.exceptions.ChannelPreconditionFailed):
            await _declare(dlq, other)


async def test_looking_at_the_dlq_25_times_keeps_every_dead_letter_in_order(
    broker: AmqpJobBroker, rabbit: RabbitProbe
) -> None:
    dlq = rabbit.topology.dead_letter_queue
    for n in range(3):
        await rabbit.publish_raw(dlq, f"poison {n}".encode())

    looks = [await broker.peek_dead_letters(10) for _ in range(LOOKS)]
    left = await rabbit.drain(dlq)

    previews = [[letter.preview for letter in look] for look in looks]
    assert previews == [["poison 0", "poison 1", "poison 2"]] * LOOKS
    assert [m.body for m in left] == [b"poison 0", b"poison 1", b"poison 2"]
    # Each look was counted as a delivery (why the limit matters): 25 of them.
    assert [m.headers.get("x-delivery-count") for m in left] == [LOOKS] * 3


async def test_a_dlq_declared_without_a_limit_is_kept_with_a_warning(
    stack_settings: Settings, rabbit: RabbitProbe, caplog: pytest.LogCaptureFixture
) -> None:
    dlq = rabbit.topology.dead_letter_queue
    await _declare(dlq, {"x-queue-type": "quorum"})  # as jobrail declared it before
    await rabbit.publish_raw(dlq, b"old letter")
    broker = AmqpJobBroker(stack_settings.rabbit)

    with caplog.at_level(logging.WARNING, logger="jobrail.broker"):
        await broker.startup()
    try:
        connected = broker.is_connected
        scannable = broker.safe_to_scan
        letters = await broker.peek_dead_letters(10)
    finally:
        await broker.shutdown()

    assert connected
    assert not scannable  # single-job redrives leave it alone
    assert [letter.preview for letter in letters] == ["old letter"]
    [warning] = [r for r in caplog.records if "exists with other arguments" in r.getMessage()]
    assert f'"delivery-limit": {DEAD_LETTER_DELIVERY_LIMIT}' in warning.getMessage()
    assert "rabbitmqctl set_policy jobrail-dlq" in warning.getMessage()


async def test_a_pass_over_the_dlq_looks_only_at_the_letters_waiting_when_it_began(
    broker: AmqpJobBroker, rabbit: RabbitProbe
) -> None:
    # A redrive of everything whose job fails again at once must not meet that job's
    # new letter in the same pass (it would report it, or redrive it twice).
    dlq = rabbit.topology.dead_letter_queue
    for n in range(2):
        await rabbit.publish_raw(dlq, f"poison {n}".encode())
    seen: list[str] = []

    async def decide(letter: Any) -> bool:
        seen.append(letter.preview)
        await rabbit.publish_raw(dlq, f"arrived during the pass {len(seen)}".encode())
        return True  # let it go

    await broker.settle_dead_letters(decide, limit=100)
    left = await rabbit.drain(dlq)

    assert seen == ["poison 0", "poison 1"]
    assert [m.body for m in left] == [b"arrived during the pass 1", b"arrived during the pass 2"]
