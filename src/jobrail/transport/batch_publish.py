"""A batch of messages published on one channel in one write, each with its own confirm.

Why this reaches past aiormq's public API: aiormq publishes one message per
``basic_publish`` call, and per message that call takes the channel's lock, opens a
deadline and a context manager, and queues its frames for the connection's writer task,
which wakes once per message. The fast path publishes the enqueues of a loop turn
together (``jobrail.outbox.relay``); one call per message cost 2.7 times the CPU
per message of one batch of 32 (232 against 86 us, ``python -m bench.publish_cost``). aiormq
has no batch publish, so `publish_batch` does what ``basic_publish`` does, for many
messages under one hold of the lock and in one queued write: a delivery tag and a
confirmation future per message (RabbitMQ confirms each), and the message id noted so
that a returned (unroutable, ``mandatory``) message fails its own future.

What it uses of aiormq's channel besides its public API: ``lock``, ``delivery_tag``,
``confirmations``, ``message_id_delivery_tag``, ``write_queue``, ``number`` and
``_split_body``, and ``ChannelFrame.marshall``. ``tests/integration/test_batch_publish.py``
fails on an upgrade that changes them; pyproject.toml keeps aiormq below 8.
"""

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import aiormq
from aiormq import spec
from aiormq.abc import ChannelFrame
from pamqp.header import ContentHeader


@dataclass(frozen=True, slots=True)
class Outbound:
    """One message of a batch: published ``mandatory`` to `exchange` with `routing_key`.
    Its properties must carry a message id (how RabbitMQ's return names it)."""

    body: bytes
    exchange: str
    routing_key: str
    properties: spec.Basic.Properties


async def publish_batch(
    channel: aiormq.abc.AbstractChannel, messages: Sequence[Outbound], timeout_s: float
) -> list[BaseException | None]:
    """Publish `messages` in order and wait for RabbitMQ's confirm of each, `timeout_s`
    at most for all. Each message's outcome: None when confirmed, else why not (aiormq's
    ``PublishError`` for a returned message, ``DeliveryError`` for a nack, the channel's
    close reason, ``TimeoutError`` past the deadline). Raises, publishing nothing, when
    the channel is closed or its lock is not had in time."""
    if not messages:
        return []
    ch: Any = channel  # aiormq.Channel: the internals named in the module's docstring
    if not ch.publisher_confirms:
        raise ValueError("publish_batch needs a channel with publisher confirms")
    if not all(message.properties.message_id for message in messages):
        raise ValueError("every message of a batch needs a message id")
    frames: list[Any] = []
    for message in messages:
        frames.append(
            spec.Basic.Publish(
                exchange=message.exchange, routing_key=message.routing_key, mandatory=True
            )
        )
        frames.append(ContentHeader(properties=message.properties, body_size=len(message.body)))
        frames.extend(ch._split_body(message.body))
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    confirms: list[asyncio.Future[Any]] = []
    async with asyncio.timeout_at(deadline), ch.lock:
        first = ch.delivery_tag + 1
        for tag, message in enumerate(messages, start=first):
            message_id = str(message.properties.message_id)
            confirm = ch.create_future()
            ch.confirmations[tag] = confirm
            ch.message_id_delivery_tag[message_id] = tag
            confirm.add_done_callback(_forgetting(ch, message_id, tag))
            confirms.append(confirm)
        ch.delivery_tag = first + len(messages) - 1
        try:
            # A bounded queue: this waits, as basic_publish does, while the writer is behind.
            await ch.write_queue.put(
                ChannelFrame.marshall(frames=frames, channel_number=ch.number, drain_future=None)
            )
        except BaseException:
            # Nothing went out: give the tags back, as basic_publish does (the lock is
            # still held, so no other publish took a tag since).
            ch.delivery_tag = first - 1
            for tag, confirm in enumerate(confirms, start=first):
                ch.confirmations.pop(tag, None)
                confirm.cancel()
            raise
    try:
        await asyncio.wait(confirms, timeout=max(0.0, deadline - loop.time()))
    finally:
        for confirm in confirms:
            # Past the deadline (or cancelled): the broker's later reply is ignored.
            confirm.cancel()
    return [_outcome(confirm) for confirm in confirms]


def _outcome(confirm: "asyncio.Future[Any]") -> BaseException | None:
    if confirm.cancelled():
        return TimeoutError("no publisher confirm in time")
    return confirm.exception()


def _forgetting(ch: Any, message_id: str, tag: int) -> Any:
    def forget(_: "asyncio.Future[Any]") -> None:
        if ch.message_id_delivery_tag.get(message_id) == tag:
            ch.message_id_delivery_tag.pop(message_id)

    return forget
