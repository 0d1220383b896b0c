"""A counting TCP proxy: it forwards bytes and counts protocol messages on the way.

Counting at the wire, not in the code under test, is what makes these figures
honest: a round trip is a round trip whichever library made it.

- Postgres (frontend messages): a round trip is a Sync ('S') or a simple Query
  ('Q'); a statement is an Execute ('E') or a simple Query other than
  BEGIN/COMMIT/ROLLBACK. What a driver asks once on each new connection (asyncpg's
  type introspection, SQLAlchemy's dialect checks) is counted apart, under
  ``connection_setup``: bounded by the pool's size, it is no cost of a job.
- AMQP 0-9-1 (client frames): a publish is a Basic.Publish method frame.
- Redis (RESP commands a client sends): a script call is an EVALSHA or an EVAL, each
  command of a pipeline counted on its own.
"""

import asyncio
import struct
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

TRANSACTION_CONTROL = (b"BEGIN", b"COMMIT", b"ROLLBACK", b"START TRANSACTION")
# The statements a driver runs once per connection (asyncpg introspects the types a
# connection's first statements use, with JIT turned off meanwhile; SQLAlchemy's
# asyncpg dialect reads the server's version and settings on connect).
CONNECTION_SETUP = (
    b"typeinfo_tree",
    b"set_config('jit'",
    b"current_setting('jit')",
    b"select pg_catalog.version()",
    b"select current_schema()",
    b"show transaction isolation level",
    b"show standard_conforming_strings",
)


@dataclass
class PostgresCounter:
    counts: Counter[str] = field(default_factory=Counter)

    def parser(self) -> Callable[[bytes], None]:
        """The parser of one connection's frontend messages."""
        buffer = bytearray()
        started = False
        connection = _Statements()

        def feed(data: bytes) -> None:
            nonlocal started
            buffer.extend(data)
            while True:
                if not started:  # startup / SSL request: length-prefixed, no type byte
                    if len(buffer) < 4:
                        return
                    (length,) = struct.unpack("!I", buffer[:4])
                    if len(buffer) < length:
                        return
                    code = struct.unpack("!I", buffer[4:8])[0] if length >= 8 else 0
                    del buffer[:length]
                    if code != 80877103:  # not an SSLRequest: the real startup message
                        started = True
                    continue
                if len(buffer) < 5:
                    return
                kind = chr(buffer[0])
                (length,) = struct.unpack("!I", buffer[1:5])
                if len(buffer) < length + 1:
                    return
                body = bytes(buffer[5 : length + 1])
                del buffer[: length + 1]
                self._count(kind, body, connection)

        return feed

    def _count(self, kind: str, body: bytes, connection: "_Statements") -> None:
        if kind == "P":  # Parse: statement name, then its text
            name, _, rest = body.partition(b"\x00")
            connection.texts[name] = rest.partition(b"\x00")[0]
        elif kind == "B":  # Bind: portal name, then the statement it runs
            statement = body.split(b"\x00", 2)[1]
            connection.bound = connection.texts.get(statement, b"")
        elif kind == "S":  # the round trip of what was executed since the last one
            setup = connection.setup
            self.counts["connection_setup_round_trips" if setup else "round_trips"] += 1
            connection.setup = False
        elif kind == "E":
            connection.setup = any(marker in connection.bound for marker in CONNECTION_SETUP)
            self.counts["connection_setup" if connection.setup else "statements"] += 1
        elif kind == "Q":
            self.counts["round_trips"] += 1
            text = body.rstrip(b"\x00").strip().upper()
            if text.startswith(TRANSACTION_CONTROL):
                self.counts["transaction_control"] += 1
            else:
                self.counts["statements"] += 1


@dataclass
class _Statements:
    """One connection's prepared statements (name -> text) and the one bound last."""

    texts: dict[bytes, bytes] = field(default_factory=dict)
    bound: bytes = b""
    setup: bool = False  # whether what was executed since the last Sync was setup


@dataclass
class AmqpCounter:
    counts: Counter[str] = field(default_factory=Counter)

    def parser(self) -> Callable[[bytes], None]:
        buffer = bytearray()
        header_seen = False

        def feed(data: bytes) -> None:
            nonlocal header_seen
            buffer.extend(data)
            if not header_seen:
                if len(buffer) < 8:
                    return
                del buffer[:8]  # "AMQP\x00\x00\x09\x01"
                header_seen = True
            while len(buffer) >= 7:
                frame_type = buffer[0]
                (size,) = struct.unpack("!I", buffer[3:7])
                if len(buffer) < size + 8:
                    return
                payload = bytes(buffer[7 : 7 + size])
                del buffer[: size + 8]
                if frame_type == 1 and len(payload) >= 4:
                    class_id, method_id = struct.unpack("!HH", payload[:4])
                    if (class_id, method_id) == (60, 40):
                        self.counts["publishes"] += 1
                    elif (class_id, method_id) == (60, 80):
                        self.counts["acks"] += 1

        return feed


@dataclass
class RedisCounter:
    counts: Counter[str] = field(default_factory=Counter)

    def parser(self) -> Callable[[bytes], None]:
        buffer = bytearray()

        def feed(data: bytes) -> None:
            buffer.extend(data)
            while (name := _resp_command(buffer)) is not None:
                self.counts["commands"] += 1
                if name in (b"EVALSHA", b"EVAL"):
                    self.counts["scripts"] += 1

        return feed


def _resp_command(buffer: bytearray) -> bytes | None:
    """The name of the first whole command in `buffer` (removed from it), or None while
    it has not all arrived. A command is an array of bulk strings."""
    end = buffer.find(b"\r\n")
    if end < 0:
        return None
    if buffer[:1] != b"*":  # an inline command: one line
        line = bytes(buffer[:end])
        del buffer[: end + 2]
        return line.split(b" ", 1)[0].upper()
    count, at, name = int(buffer[1:end]), end + 2, b""
    for i in range(count):
        end = buffer.find(b"\r\n", at)
        if end < 0:
            return None
        size = int(buffer[at + 1 : end])
        if len(buffer) < end + 2 + size + 2:
            return None
        if i == 0:
            name = bytes(buffer[end + 2 : end + 2 + size]).upper()
        at = end + 2 + size + 2
    del buffer[:at]
    return name


class CountingProxy:
    def __init__(
        self, target_port: int, counter: PostgresCounter | AmqpCounter | RedisCounter
    ) -> None:
        self._target_port = target_port
        self.counter = counter
        self._server: asyncio.Server | None = None
        self.port = 0

    async def start(self) -> "CountingProxy":
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self._target_port)
        except OSError:
            writer.close()
            return
        feed = self.counter.parser()

        async def pipe(
            source: asyncio.StreamReader,
            sink: asyncio.StreamWriter,
            count: Callable[[bytes], None] | None,
        ) -> None:
            try:
                while data := await source.read(65536):
                    if count is not None:
                        count(data)
                    sink.write(data)
                    await sink.drain()
            except (ConnectionError, asyncio.CancelledError):
                pass
            finally:
                sink.close()

        await asyncio.gather(pipe(reader, up_writer, feed), pipe(up_reader, writer, None))
