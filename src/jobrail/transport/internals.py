"""The one place jobrail reaches past the public APIs of Taskiq, taskiq-aio-pika and
aiormq, and why. Three things, each with a test that fails on an upgrade that breaks it.

**1. taskiq-aio-pika's broker: its connections and declarations.**

jobrail's AMQP broker is taskiq-aio-pika's ``AioPikaBroker``, configured through its
public ``Exchange`` and ``Queue``: it declares the work exchange and the work queues (so
their arguments are the ones taskiq-aio-pika gives them, in every process that declares
them), and Taskiq's own ``kick`` and ``shutdown`` work on it. What jobrail needs besides
has no public hook, so it is done here, on the broker's attributes and methods:

- Its own connections. ``AioPikaBroker.startup`` connects, runs Taskiq's start-up events
  and declares, all in one; jobrail retries connecting (an API starts without RabbitMQ)
  without running the events again, closes what it opened when a step fails, and watches
  each connection (``jobrail.transport.reconnects``): it runs Taskiq's part of the start-up
  alone (`taskiq_startup`) and connects on its own. The connections are attached as the
  broker's ``write_conn``/``write_channel``/``read_conn``/``read_channel``, which ``kick``,
  the declarations and ``shutdown`` use.
- The declarations alone: ``_declare_exchanges`` (on ``write_channel``) and
  ``_declare_queues(channel)``.
- The queues ``_declare_queues`` returns, as (queue, consumer arguments) pairs. The public
  ``listen`` yields a message's body and its ack only, while jobrail's consumer needs the
  AMQP message (its id and headers go into a dead letter; its ack must survive a closed
  channel). The queues must be declared on the consuming channel: aio-pika's robust
  channel restores a consumer after a reconnect only on a queue it declared.

``tests/unit/test_internals.py`` fails when an upgrade changes any of it.

**2. Taskiq's receiver queue.** Taskiq's runner takes its queue's items as
``taskiq.receiver.receiver._PrefetchedMessage`` and stops at ``_QueueSignal.DONE``, both
private to Taskiq; jobrail's receiver (``jobrail.transport.receiver``) batches what the
prefetcher queues and hands over the deliveries the broker has received behind it,
wrapped as such items (`prefetched`), owning no delivery slot of Taskiq's prefetcher.
``tests/unit/test_job_receiver.py`` fails on an upgrade that changes them.

**3. aiormq's publish, for a batch.** aiormq publishes one message per
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
from aio_pika.abc import AbstractChannel, AbstractQueue, AbstractRobustConnection
from aiormq import spec
from aiormq.abc import ChannelFrame
from pamqp.header import ContentHeader
from taskiq import AckableMessage, AsyncBroker
from taskiq.receiver.receiver import _PrefetchedMessage, _QueueSignal
from taskiq_aio_pika import AioPikaBroker

__all__ = [
    "QUEUE_DONE",
    "Outbound",
    "attach_connections",
    "declare_exchanges",
    "declare_queues",
    "prefetched",
    "publish_batch",
    "taskiq_startup",
]


# -- taskiq-aio-pika's broker ------------------------------------------------------------


async def taskiq_startup(broker: AioPikaBroker) -> None:
    """Taskiq's start-up of `broker` (its events, middlewares and result backend), without
    the connecting and declaring that ``AioPikaBroker.startup`` adds to it."""
    await AsyncBroker.startup(broker)


def attach_connections(
    broker: AioPikaBroker,
    *,
    write: AbstractRobustConnection,
    write_channel: AbstractChannel,
    read: AbstractRobustConnection | None = None,
    read_channel: AbstractChannel | None = None,
) -> None:
    """Make `broker` publish, declare and shut down on connections opened elsewhere."""
    broker.write_conn, broker.write_channel = write, write_channel
    if read is not None:
        broker.read_conn, broker.read_channel = read, read_channel


async def declare_exchanges(broker: AioPikaBroker) -> None:
    """Declare the broker's exchange, on its attached `write_channel`."""
    await broker._declare_exchanges()


async def declare_queues(broker: AioPikaBroker, channel: AbstractChannel) -> list[AbstractQueue]:
    """Declare the broker's work queues (bound to its exchange) on `channel`, and check
    that its dead-letter queue exists; return the work queues."""
    return [queue for queue, _consumer_arguments in await broker._declare_queues(channel)]


# -- Taskiq's receiver queue ------------------------------------------------------------

QUEUE_DONE = _QueueSignal.DONE
"""What Taskiq's prefetcher queues when it stops."""


def prefetched(message: AckableMessage) -> _PrefetchedMessage:
    """`message` as an item of Taskiq's runner queue, owning no delivery slot of Taskiq's
    prefetcher (RabbitMQ's prefetch bounds them, and ``--max-async-tasks`` what runs)."""
    return _PrefetchedMessage(data=message, owns_delivery_slot=False)


# -- aiormq's publish, for a batch -------------------------------------------------------


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
