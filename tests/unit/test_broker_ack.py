"""The AMQP broker's ack: a closed channel is expected (RabbitMQ restarts), anything
else is an error someone must see."""

import logging
from typing import Any

import aiormq
import pytest
from aio_pika.exceptions import ChannelInvalidStateError, MessageProcessError

from jobrail.settings import RabbitSettings
from jobrail.transport.amqp_broker import AmqpJobBroker


class Channel:
    def __init__(self, closed: bool) -> None:
        self.is_closed = closed


class Message:
    """What the consumer's `ack` uses of aio-pika's IncomingMessage: its id, `ack` and `channel`
    (which aio-pika makes raise ChannelInvalidStateError once the channel closed)."""

    message_id = "m-1"

    def __init__(self, error: Exception, channel_closed: bool = False) -> None:
        self._error = error
        self._closed = channel_closed

    @property
    def channel(self) -> Channel:
        if self._closed:
            raise ChannelInvalidStateError
        return Channel(closed=False)

    async def ack(self) -> None:
        raise self._error


def _records(caplog: pytest.LogCaptureFixture, level: int) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "jobrail.broker" and r.levelno == level]


@pytest.mark.parametrize(
    "message",
    [
        Message(ChannelInvalidStateError("closed")),
        Message(aiormq.exceptions.ConnectionClosed(320, "CONNECTION_FORCED")),
        Message(aiormq.exceptions.ChannelClosed(406, "PRECONDITION_FAILED")),
        Message(ConnectionResetError("reset by peer")),
        # aiormq raised something else, but the channel is gone all the same
        Message(aiormq.exceptions.AMQPError("frame"), channel_closed=True),
    ],
    ids=["invalid state", "connection closed", "channel closed", "socket", "closed since"],
)
async def test_an_ack_on_a_closed_channel_is_counted_not_an_error(
    message: Any, caplog: pytest.LogCaptureFixture
) -> None:
    broker = AmqpJobBroker(RabbitSettings())
    caplog.set_level(logging.DEBUG, logger="jobrail.broker")

    await broker._consumer.ack(message)

    assert _records(caplog, logging.ERROR) == []
    [debug] = _records(caplog, logging.DEBUG)
    assert "its channel is gone" in debug.getMessage()
    assert broker._watch._lost_acks == 1


@pytest.mark.parametrize(
    "error",
    [
        MessageProcessError("Message already processed", None),  # a second ack: a bug
        RuntimeError("something else"),
        aiormq.exceptions.AMQPError("unexpected"),
    ],
    ids=["double ack", "runtime error", "amqp error"],
)
async def test_any_other_ack_failure_is_logged_at_error_and_not_counted(
    error: Exception, caplog: pytest.LogCaptureFixture
) -> None:
    broker = AmqpJobBroker(RabbitSettings())
    caplog.set_level(logging.DEBUG, logger="jobrail.broker")

    message: Any = Message(error)
    await broker._consumer.ack(message)

    [logged] = _records(caplog, logging.ERROR)
    assert "m-1" in logged.getMessage()
    assert logged.exc_info is not None
    assert broker._watch._lost_acks == 0
