"""What aio-pika and aiormq log on an expected reconnect is demoted; nothing else is."""

import logging
from collections.abc import Iterator
from typing import Any

import pytest
from aiormq.exceptions import AMQPConnectionError

from jobrail.telemetry.logging import ExpectedReconnectFilter


class _OnClose:
    def __repr__(self) -> str:
        return (
            "<OneShotCallback: cb=<bound method RobustChannel._on_close of "
            "<aio_pika.robust_channel.RobustChannel object at 0x7f>>>"
        )


Spec = tuple[str, int, str, tuple[Any, ...]]


def record(logger: str, level: int, msg: str, *args: Any) -> Spec:
    return (logger, level, msg, args)


def made(spec: Spec) -> logging.LogRecord:
    """A fresh record each time: the filter changes the records it demotes."""
    logger, level, msg, args = spec
    return logging.LogRecord(logger, level, "x.py", 1, msg, args, None)


def named(spec: Spec) -> str:
    return f"{spec[0]}:{spec[2][:30]}"


EXPECTED = [
    record("aiormq.connection", logging.WARNING, "Cancelling cause reader exited abnormally"),
    record(
        "aiormq.connection",
        logging.ERROR,
        "error when creating transport: %r",
        AMQPConnectionError(111, "Connection refused"),
    ),
    record(
        "aiormq.connection",
        logging.ERROR,
        "error when creating transport: %r",
        ConnectionRefusedError(111, "Connection refused"),
    ),
    record(
        "aiormq.connection",
        logging.ERROR,
        'Unexpected connection close from remote "%s", Connection.Close(reply_code=%r, '
        "reply_text=%r)",
        "amqp://guest:******@127.0.0.1:5672/",
        320,
        "CONNECTION_FORCED - broker forced connection closure with reason 'shutdown'",
    ),
    record(
        "aio_pika.robust_connection",
        logging.WARNING,
        'Connection attempt to "%s" failed: %s. Reconnecting after %r seconds.',
        "amqp://guest:******@127.0.0.1:5672/",
        ConnectionRefusedError(111, "Connect call failed"),
        5,
    ),
    record(
        "aio_pika.tools",
        logging.ERROR,
        "Callback %r error: %s: %s",
        _OnClose(),
        "RuntimeError",
        RuntimeError('<Connection: "amqp://guest:******@127.0.0.1:5672/" at 0x7f> closed'),
    ),
    record(
        "aio_pika.tools",
        logging.ERROR,
        "Callback %r error: %s: %s",
        _OnClose(),
        "ChannelInvalidStateError",
        Exception("No active transport in channel"),
    ),
]

KEPT = [
    # A transport that cannot be made for another reason than a broker away (TLS...).
    record(
        "aiormq.connection",
        logging.ERROR,
        "error when creating transport: %r",
        ValueError("bad certificate"),
    ),
    # Another close code is not a restart: an access refusal, a protocol error...
    record(
        "aiormq.connection",
        logging.ERROR,
        'Unexpected connection close from remote "%s", Connection.Close(reply_code=%r, '
        "reply_text=%r)",
        "amqp://guest:******@127.0.0.1:5672/",
        530,
        "NOT_ALLOWED - access to vhost '/' refused",
    ),
    record("aiormq.connection", logging.WARNING, "Connection %r was blocked by: %r", "c", "disk"),
    record(
        "aio_pika.tools",
        logging.ERROR,
        "Callback %r error: %s: %s",
        _OnClose(),
        "RuntimeError",
        RuntimeError("something else broke"),
    ),
    record(
        "aio_pika.tools",
        logging.ERROR,
        "Callback %r error: %s: %s",
        "<function on_message>",
        "ChannelInvalidStateError",
        Exception("x"),
    ),
    record("jobrail.broker", logging.WARNING, "lost the connection to RabbitMQ (%s)", "x"),
    record("asyncio", logging.ERROR, "Task exception was never retrieved"),
]


@pytest.fixture
def libraries_at(request: pytest.FixtureRequest) -> Iterator[None]:
    """The libraries' loggers at a level, as configure_logging sets them."""
    loggers = [logging.getLogger(name) for name in ("aiormq", "aio_pika")]
    before = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(request.param)
    yield
    for logger, level in zip(loggers, before, strict=True):
        logger.setLevel(level)


@pytest.mark.parametrize("libraries_at", [logging.WARNING], indirect=True)
@pytest.mark.parametrize("expected", EXPECTED, ids=named)
def test_an_expected_reconnect_record_is_dropped_at_the_default_levels(
    libraries_at: None, expected: Spec
) -> None:
    assert ExpectedReconnectFilter().filter(made(expected)) is False


@pytest.mark.parametrize("libraries_at", [logging.DEBUG], indirect=True)
def test_when_debugging_an_expected_reconnect_record_is_kept_at_info(libraries_at: None) -> None:
    for expected in EXPECTED:
        kept = made(expected)
        assert kept.levelno >= logging.WARNING
        assert ExpectedReconnectFilter().filter(kept) is True
        assert kept.levelname == "INFO"


@pytest.mark.parametrize("libraries_at", [logging.WARNING], indirect=True)
@pytest.mark.parametrize("other", KEPT, ids=named)
def test_anything_else_keeps_its_level(libraries_at: None, other: Spec) -> None:
    kept = made(other)
    assert ExpectedReconnectFilter().filter(kept) is True
    assert kept.levelno == other[1]
