"""What aio-pika and aiormq raise when RabbitMQ, a connection or a channel is gone."""

import aiormq
from aio_pika.abc import AbstractIncomingMessage
from aio_pika.exceptions import ChannelInvalidStateError

# What an operation on a channel or connection that has closed raises (aio-pika, aiormq).
CHANNEL_GONE = (
    ChannelInvalidStateError,
    aiormq.exceptions.AMQPError,
    ConnectionError,
    RuntimeError,
)


def channel_closed(message: AbstractIncomingMessage, exc: Exception) -> bool:
    """Whether an ack failed because the message's channel or connection has closed."""
    if isinstance(
        exc,
        (
            ChannelInvalidStateError,
            aiormq.exceptions.ChannelClosed,
            aiormq.exceptions.ConnectionClosed,
            ConnectionError,
        ),
    ):
        return True
    try:
        return bool(message.channel.is_closed)
    except ChannelInvalidStateError:  # what aio-pika raises for a closed channel
        return True


def why(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
