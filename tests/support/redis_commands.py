"""Count the Redis commands one process sends, without server-wide statistics.

``INFO commandstats`` counts every client of the server: on a Redis other test sessions
use too, any of them adds to the count. A ``CommandCounter`` is a loopback proxy in
front of the real Redis: give a process its address as the Redis URL and it counts the
commands that process sends (each command of a pipeline on its own), by name.

MONITOR would also see every client's commands and costs the shared server a copy of
each; the proxy costs nothing but this test's own traffic. The client-to-server
stream is parsed with hiredis (redis-py's own parser), so pipelined and partial
reads are counted exactly.
"""

import asyncio
import contextlib
from collections import Counter
from types import TracebackType

import hiredis


class CommandCounter:
    """Forwards ``127.0.0.1:<port>`` to Redis and counts the commands sent through it."""

    def __init__(self, target_port: int = 6379, target_host: str = "127.0.0.1") -> None:
        self._target = (target_host, target_port)
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self.counts: Counter[str] = Counter()
        self.port = 0

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def snapshot(self) -> Counter[str]:
        return Counter(self.counts)

    async def __aenter__(self) -> "CommandCounter":
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        assert self._server is not None
        self._server.close()
        for writer in list(self._writers):
            writer.close()
        await self._server.wait_closed()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(*self._target)
        except OSError:
            writer.close()
            return
        self._writers.update((writer, up_writer))
        await asyncio.gather(
            self._pipe(reader, up_writer, count=True),
            self._pipe(up_reader, writer, count=False),
        )
        self._writers.difference_update((writer, up_writer))

    async def _pipe(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, count: bool
    ) -> None:
        parser = hiredis.Reader() if count else None
        try:
            while data := await reader.read(65536):
                if parser is not None:
                    parser.feed(data)
                    while (command := parser.gets()) is not False:
                        name = command[0] if isinstance(command, list) and command else b"?"
                        self.counts[bytes(name).decode(errors="replace").upper()] += 1
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            with contextlib.suppress(Exception):
                writer.close()
