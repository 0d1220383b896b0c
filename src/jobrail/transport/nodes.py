"""Connections to one node of a RabbitMQ cluster at a time, moving on when it fails.

aio-pika's robust connection reconnects to the one URL it was given, and aiormq opens the
socket through a ``TransportFactory`` that receives that URL: `FailoverTransportFactory`
opens it to a node of `Nodes` instead, the node the process is on, or the next one when
that one refuses. The process's connections share one `Nodes`, so that they use the same
node and move together. A node counts as failed when its socket cannot be opened, when
the AMQP handshake on it does not complete (the next attempt finds the previous one
unconfirmed), and when an open connection to it is lost. Moving to another node is
logged once, at WARNING; each refused node is a DEBUG line.

Queues stay where they are: with quorum queues every node of the cluster serves every
queue (a node forwards to the queue's leader), so a consumer restored on another node by
aio-pika's robust channel takes deliveries again as soon as it is connected.
"""

import asyncio
import logging
import random
from collections.abc import Sequence
from typing import Any

from aio_pika.connection import make_url
from aiormq import TransportFactory
from aiormq.exceptions import AMQPConnectionError
from yarl import URL

from jobrail.transport.frames import CoalescingRobustConnection

log = logging.getLogger("jobrail.broker")

__all__ = ["FailoverRobustConnection", "FailoverTransportFactory", "Nodes", "connect_node"]


class Nodes:
    """The nodes of one process, in the order it tries them (shuffled once, or as
    written), and the one it is on."""

    def __init__(self, urls: Sequence[str], *, shuffle: bool, rng: random.Random | None = None):
        if not urls:
            raise ValueError("at least one RabbitMQ node is needed")
        self._addresses = [_address(URL(url)) for url in urls]
        if shuffle:
            (rng or random.Random()).shuffle(self._addresses)  # noqa: S311 - load spreading
        self._at = 0
        self._on: str | None = None

    @property
    def addresses(self) -> list[str]:
        """host:port of every node, in the order they are tried."""
        return list(self._addresses)

    @property
    def current(self) -> str:
        """The node the next connection attempt starts with."""
        return self._addresses[self._at]

    @property
    def connected_to(self) -> str | None:
        """The node a connection of this process reached last."""
        return self._on

    def failed(self, address: str) -> None:
        """`address` refused, or its connection was lost: the next attempt starts with the
        node after it (unless another connection has already moved on)."""
        if address == self.current and len(self._addresses) > 1:
            self._at = (self._at + 1) % len(self._addresses)
            log.debug("RabbitMQ node %s failed; trying %s next", address, self.current)

    def connected(self, address: str) -> None:
        if address in self._addresses:
            self._at = self._addresses.index(address)
        if self._on is not None and address != self._on:
            log.warning(
                "moved from RabbitMQ node %s to %s (the nodes: %s)",
                self._on,
                address,
                ", ".join(self._addresses),
            )
        self._on = address

    def order_from_current(self) -> list[str]:
        return self._addresses[self._at :] + self._addresses[: self._at]


class FailoverTransportFactory(TransportFactory):
    """Opens aiormq's socket to the current node of `nodes`, trying the others in turn
    when it is refused (`inner` opens each one)."""

    def __init__(self, nodes: Nodes, inner: TransportFactory) -> None:
        self._nodes = nodes
        self._inner = inner
        self._unconfirmed: str | None = None
        self.address: str | None = None

    async def create(
        self, url: URL, **kwargs: Any
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if self._unconfirmed is not None:
            # The last attempt opened a socket but its handshake did not complete.
            self._nodes.failed(self._unconfirmed)
            self._unconfirmed = None
        refused: AMQPConnectionError | None = None
        for address in self._nodes.order_from_current():
            host, _, port = address.rpartition(":")
            target = url.with_host(host.strip("[]")).with_port(int(port))
            try:
                opened = await self._inner.create(target, **dict(kwargs))
            except AMQPConnectionError as exc:
                log.debug("RabbitMQ node %s refused: %s", address, exc)
                self._nodes.failed(address)
                refused = exc
                continue
            except BaseException:
                # Timed out (or cancelled) on this node: the next attempt tries another.
                self._nodes.failed(address)
                raise
            self._unconfirmed = self.address = address
            return opened
        assert refused is not None
        raise refused

    def confirmed(self) -> None:
        """The connection opened on `address` is up (handshake done, channels restored)."""
        self._unconfirmed = None
        if self.address is not None:
            self._nodes.connected(self.address)

    def lost(self) -> None:
        if self.address is not None:
            self._nodes.failed(self.address)


class FailoverRobustConnection(CoalescingRobustConnection):
    """aio-pika's robust connection (with coalesced writes) over `Nodes`: every
    (re)connection attempt opens its socket with a `FailoverTransportFactory`."""

    def __init__(self, url: URL, *, nodes: Nodes, **kwargs: Any) -> None:
        super().__init__(url, **kwargs)
        self.failover = FailoverTransportFactory(nodes, self.kwargs["transport_factory"])
        self.kwargs["transport_factory"] = self.failover

    async def _on_connected(self) -> None:
        await super()._on_connected()
        self.failover.confirmed()
        if self.failover.address is not None:
            # aio-pika names the connection by its URL in its logs: the node it is on.
            host, _, port = self.failover.address.rpartition(":")
            self.url = self.url.with_host(host.strip("[]")).with_port(int(port))

    async def _on_connection_close(self, closing: asyncio.Future[Any]) -> None:
        if not self._close_called:
            self.failover.lost()
        await super()._on_connection_close(closing)


async def connect_node(
    nodes: Nodes, url: str, *, timeout: float, reconnect_interval: float
) -> FailoverRobustConnection:
    """What ``aio_pika.connect_robust(url, ...)`` does, on `nodes` (`url` gives the user,
    password, virtual host and options; its host is replaced by a node's)."""
    connection = FailoverRobustConnection(
        make_url(url, reconnect_interval=reconnect_interval), nodes=nodes
    )
    await connection.connect(timeout=timeout)
    return connection


def _address(url: URL) -> str:
    host = url.host or "localhost"
    if ":" in host:
        host = f"[{host}]"
    port = url.port or (5671 if url.scheme == "amqps" else 5672)
    return f"{host}:{port}"
