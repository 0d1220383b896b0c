"""AMQP connections whose frames written in one event-loop turn go out in one write.

aiormq writes every frame (a publish, an ack) to its socket on its own, and on the
loopback or a fast network each write is a system call that also does the receiving
side's work: profiled under load, the API spent about a tenth of its CPU in those writes,
one per enqueued job. Frames made in the same loop turn (the publishes of one group
commit, the deferrals of a batch) now go out joined, in one write at the end of the
turn, in the order they were written. (An ack waits for its own frame to be written,
aiormq's ``basic_ack(wait=True)``, so acks still go out one per turn.)

The hook is public: aiormq takes a ``TransportFactory`` for its socket, and aio-pika's
``connect_robust`` takes the connection class, whose ``kwargs`` it hands to aiormq.
``tests/integration/test_amqp_frames.py`` fails on an upgrade that stops passing it through.
"""

import asyncio
import contextlib
from typing import Any

import aio_pika
from aiormq import TransportFactory
from aiormq.connection import TCPTransportFactory, TLSTransportFactory
from yarl import URL

__all__ = ["CoalescingRobustConnection", "CoalescingTransportFactory"]


class _CoalescingWriter:
    """A ``StreamWriter`` whose writes within one loop turn go out as one (see the
    module). What aiormq uses besides ``write``, ``drain`` and ``close`` is the stream
    writer's own."""

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self._writer = writer
        self._pending: list[bytes] = []
        self._loop = asyncio.get_running_loop()

    def write(self, data: bytes) -> None:
        if not self._pending:
            self._loop.call_soon(self._flush)
        self._pending.append(data)

    def _flush(self) -> None:
        if not self._pending:
            return
        data = b"".join(self._pending)
        self._pending.clear()
        # A transport that refuses data is closed: aiormq's reader learns that the
        # connection is gone, and aio-pika reconnects, as when aiormq wrote itself.
        with contextlib.suppress(RuntimeError):
            self._writer.write(data)

    async def drain(self) -> None:
        self._flush()
        await self._writer.drain()

    def close(self) -> None:
        self._flush()
        self._writer.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._writer, name)


class CoalescingTransportFactory(TransportFactory):
    """aiormq's TCP (or, for ``amqps``, TLS) transport, with coalesced writes."""

    async def create(
        self, url: URL, **kwargs: Any
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        inner = TLSTransportFactory() if url.scheme == "amqps" else TCPTransportFactory()
        reader, writer = await inner.create(url, **kwargs)
        return reader, _CoalescingWriter(writer)  # type: ignore[return-value]


class CoalescingRobustConnection(aio_pika.RobustConnection):
    """aio-pika's robust connection on `CoalescingTransportFactory` (pass it to
    ``aio_pika.connect_robust`` as ``connection_class``)."""

    def __init__(self, url: URL, loop: asyncio.AbstractEventLoop | None = None, **kwargs: Any):
        super().__init__(url, loop=loop, **kwargs)
        self.kwargs["transport_factory"] = CoalescingTransportFactory()
