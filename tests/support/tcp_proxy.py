"""A TCP proxy on loopback that a test can cut, to take a service away from one process
only (its own connections) without stopping the service for everyone else."""

import asyncio
import contextlib
from types import TracebackType


class TcpProxy:
    """Forwards ``127.0.0.1:<port>`` to ``target_host:target_port``. ``cut(down_s)``
    drops every open connection and refuses new ones for ``down_s`` seconds (nothing
    listens on the port: a connect is refused), as a restart of the service looks to
    its clients."""

    def __init__(self, target_port: int, target_host: str = "127.0.0.1") -> None:
        self._target = (target_host, target_port)
        self._server: asyncio.Server | None = None
        self._pipes: set[asyncio.StreamWriter] = set()
        self._upstream: set[asyncio.StreamWriter] = set()
        self._replying = asyncio.Event()
        self._replying.set()
        self.port = 0

    async def __aenter__(self) -> "TcpProxy":
        await self.accept()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.refuse()
        self._drop_all()

    def upstream_ports(self) -> set[int]:
        """The local ports of the proxy's open connections to the target (the client
        ports the service sees)."""
        return {writer.get_extra_info("sockname")[1] for writer in self._upstream}

    async def refuse(self) -> None:
        """Stop listening (a connect is refused) until `accept`; open connections stay."""
        if self._server is not None:
            # close() stops listening at once (wait_closed would wait for the clients).
            self._server.close()
            self._server = None

    async def accept(self) -> None:
        """Listen (again, on the same port)."""
        if self._server is None:
            self._server = await asyncio.start_server(self._accept, "127.0.0.1", self.port)
            self.port = self._server.sockets[0].getsockname()[1]

    async def cut(self, down_s: float) -> None:
        await self.take_down()
        await asyncio.sleep(down_s)
        await self.accept()

    async def take_down(self) -> None:
        """Drop every open connection and refuse new ones until `accept`: the service
        as a stopped one looks to this proxy's clients, and to nobody else."""
        await self.refuse()
        self._drop_all()

    def hold_replies(self) -> None:
        """Stop passing on what the target sends (the connections stay open): a
        service that has stopped answering, as one under a memory alarm looks."""
        self._replying.clear()

    def pass_replies(self) -> None:
        """Pass on what the target sent meanwhile, and what it sends from now on."""
        self._replying.set()

    def _drop_all(self) -> None:
        for writer in list(self._pipes):
            writer.transport.abort()
        self._pipes.clear()
        self._upstream.clear()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(*self._target)
        except OSError:
            writer.transport.abort()
            return
        self._pipes |= {writer, up_writer}
        self._upstream.add(up_writer)
        try:
            await asyncio.gather(
                self._pump(reader, up_writer),
                self._pump(up_reader, writer, self._replying),
                return_exceptions=True,
            )
        finally:
            self._upstream.discard(up_writer)

    async def _pump(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        passing: asyncio.Event | None = None,
    ) -> None:
        try:
            while data := await reader.read(65536):
                if passing is not None:
                    await passing.wait()
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            self._pipes.discard(writer)
            with contextlib.suppress(Exception):
                writer.transport.abort()
