"""What aio-pika and aiormq log on an expected reconnect is demoted; nothing else is."""

import asyncio
import logging
import ssl
from collections.abc import Iterator
from typing import Any

import aiormq
import pytest
from aiormq.exceptions import AMQPConnectionError, ConnectionClosed, ProbableAuthenticationError

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
    return f"{spec[0]}:{spec[2][:30]}:{'/'.join(type(a).__name__ for a in spec[3])}"


def wrapped(cause: OSError) -> AMQPConnectionError:
    """What aiormq's transport factory raises for `cause`:
    ``raise AMQPConnectionError(*e.args) from e``."""
    try:
        raise AMQPConnectionError(*cause.args) from cause
    except AMQPConnectionError as exc:
        return exc


URL = "amqp://guest:******@127.0.0.1:5672/"
ATTEMPT_FAILED = 'Connection attempt to "%s" failed: %s. Reconnecting after %r seconds.'
NO_TRANSPORT = "error when creating transport: %r"
BAD_CERTIFICATE = ssl.SSLCertVerificationError(
    1,
    "[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: self-signed certificate "
    "(_ssl.c:1006)",
)
ACCESS_REFUSED = ProbableAuthenticationError(
    "ACCESS_REFUSED - Login was refused using authentication mechanism PLAIN. For details "
    "see the broker logfile."
)


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
        ATTEMPT_FAILED,
        URL,
        ConnectionRefusedError(111, "Connect call failed"),
        5,
    ),
    # What aiormq really raises when nothing listens: the refusal, wrapped.
    record(
        "aio_pika.robust_connection",
        logging.WARNING,
        ATTEMPT_FAILED,
        URL,
        wrapped(ConnectionRefusedError(111, "Connect call failed ('127.0.0.1', 5672)")),
        5,
    ),
    record(
        "aiormq.connection",
        logging.ERROR,
        NO_TRANSPORT,
        wrapped(ConnectionRefusedError(111, "Connect call failed ('127.0.0.1', 5672)")),
    ),
    record(
        "aiormq.connection",
        logging.ERROR,
        NO_TRANSPORT,
        wrapped(ConnectionResetError(104, "Connection reset by peer")),
    ),
    # A host name with an IPv6 and an IPv4 address, both refused.
    record(
        "aiormq.connection",
        logging.ERROR,
        NO_TRANSPORT,
        wrapped(
            OSError(
                "Multiple exceptions: [Errno 111] Connect call failed ('::1', 5672, 0, 0), "
                "[Errno 111] Connect call failed ('127.0.0.1', 5672)"
            )
        ),
    ),
    # The broker closed the connection before the handshake (starting or stopping).
    record(
        "aio_pika.robust_connection",
        logging.WARNING,
        ATTEMPT_FAILED,
        URL,
        AMQPConnectionError(
            "Server connection unexpectedly closed. Read 0 bytes but 1 bytes expected"
        ),
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
    # A transport that cannot be made for another reason than a broker away: TLS, as
    # aiormq reports it (wrapped) and as it is.
    record("aiormq.connection", logging.ERROR, NO_TRANSPORT, wrapped(BAD_CERTIFICATE)),
    record("aiormq.connection", logging.ERROR, NO_TRANSPORT, BAD_CERTIFICATE),
    record(
        "aiormq.connection",
        logging.ERROR,
        NO_TRANSPORT,
        wrapped(ssl.SSLError(1, "[SSL: WRONG_VERSION_NUMBER] wrong version number")),
    ),
    record(
        "aio_pika.robust_connection",
        logging.WARNING,
        ATTEMPT_FAILED,
        URL,
        wrapped(BAD_CERTIFICATE),
        5,
    ),
    # Another address that does not answer, or one of several that is unreachable.
    record("aiormq.connection", logging.ERROR, NO_TRANSPORT, wrapped(TimeoutError())),
    record(
        "aiormq.connection",
        logging.ERROR,
        NO_TRANSPORT,
        wrapped(
            OSError(
                "Multiple exceptions: [Errno 111] Connect call failed ('::1', 5672, 0, 0), "
                "[Errno 101] Network is unreachable"
            )
        ),
    ),
    # Rotated credentials, a vhost refused: waiting does not heal them.
    record("aio_pika.robust_connection", logging.WARNING, ATTEMPT_FAILED, URL, ACCESS_REFUSED, 5),
    record(
        "aio_pika.robust_connection",
        logging.WARNING,
        ATTEMPT_FAILED,
        URL,
        ConnectionClosed(530, "NOT_ALLOWED - access to vhost '/' refused for user 'guest'"),
        5,
    ),
    record(
        "aio_pika.robust_connection",
        logging.WARNING,
        ATTEMPT_FAILED,
        URL,
        TimeoutError(),
        5,
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


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


async def test_a_real_tls_failure_keeps_its_level() -> None:
    """What aiormq really logs when TLS fails (here: a server that speaks no TLS)."""

    async def not_tls(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 400 Bad Request\r\n\r\n")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(not_tls, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    records = _Records()
    source = logging.getLogger("aiormq.connection")
    source.addHandler(records)
    try:
        with pytest.raises(AMQPConnectionError) as raised:
            async with asyncio.timeout(30):
                await aiormq.connect(f"amqps://guest:guest@127.0.0.1:{port}/")
    finally:
        source.removeHandler(records)
        server.close()
        await server.wait_closed()

    assert isinstance(raised.value.__cause__, ssl.SSLError)
    [failed] = [r for r in records.records if r.msg == NO_TRANSPORT]
    assert ExpectedReconnectFilter().filter(failed) is True
    assert failed.levelno == logging.ERROR
