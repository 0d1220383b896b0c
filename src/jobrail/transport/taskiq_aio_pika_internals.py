"""The one place jobrail reaches past taskiq-aio-pika's public API, and why.

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

``tests/unit/test_taskiq_aio_pika_internals.py`` fails when an upgrade changes any of it.
"""

from aio_pika.abc import AbstractChannel, AbstractQueue, AbstractRobustConnection
from taskiq import AsyncBroker
from taskiq_aio_pika import AioPikaBroker

__all__ = [
    "attach_connections",
    "declare_exchanges",
    "declare_queues",
    "taskiq_startup",
]


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
