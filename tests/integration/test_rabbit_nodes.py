"""A connection over several RabbitMQ nodes (jobrail.transport.nodes), on the real RabbitMQ:
two TCP proxies in front of it stand for two nodes, which a test can take away one at a
time (the three-node cluster itself is the fault test's: tests/faults/test_rabbit_cluster.py).
"""

import asyncio
import logging
import time
from collections.abc import AsyncIterator

import aio_pika
import pytest

from jobrail.transport.nodes import FailoverRobustConnection, Nodes, connect_node
from tests.support.rabbit import TEARDOWN_S
from tests.support.services import AMQP_URL, require
from tests.support.tcp_proxy import TcpProxy

pytestmark = pytest.mark.integration


@pytest.fixture
async def proxies() -> AsyncIterator[tuple[TcpProxy, TcpProxy]]:
    require("rabbitmq")
    async with TcpProxy(5672) as first, TcpProxy(5672) as second:
        yield first, second


def _url(*proxies: TcpProxy) -> list[str]:
    return [f"amqp://guest:guest@127.0.0.1:{proxy.port}/" for proxy in proxies]


async def _connect(nodes: Nodes, url: str) -> FailoverRobustConnection:
    return await connect_node(nodes, url, timeout=5, reconnect_interval=0.2)


async def _close(connection: aio_pika.abc.AbstractConnection) -> None:
    async with asyncio.timeout(TEARDOWN_S):
        await connection.close()


def _moves(caplog: pytest.LogCaptureFixture) -> list[str]:
    broker = [r.getMessage() for r in caplog.records if r.name == "jobrail.broker"]
    return [line for line in broker if line.startswith("moved from RabbitMQ node")]


async def test_a_refusing_first_node_is_passed_over_without_a_warning(
    proxies: tuple[TcpProxy, TcpProxy], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, "jobrail.broker")
    first, second = proxies
    await first.refuse()
    nodes = Nodes(_url(first, second), shuffle=False)

    connection = await _connect(nodes, _url(first)[0])
    try:
        assert nodes.connected_to == f"127.0.0.1:{second.port}"
        assert connection.failover.address == f"127.0.0.1:{second.port}"
        assert _moves(caplog) == []  # the first connection is not a move
        assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
        assert f"RabbitMQ node 127.0.0.1:{first.port} refused" in caplog.text
    finally:
        await _close(connection)


async def test_losing_the_node_moves_both_connections_and_the_consumer_resumes(
    proxies: tuple[TcpProxy, TcpProxy], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "jobrail.broker")
    first, second = proxies
    nodes = Nodes(_url(first, second), shuffle=False)
    consuming = await _connect(nodes, _url(first)[0])
    publishing = await _connect(nodes, _url(first)[0])
    direct = await aio_pika.connect(AMQP_URL)
    received: asyncio.Queue[bytes] = asyncio.Queue()
    try:
        channel = await consuming.channel()
        queue = await channel.declare_queue("jobrail-test-nodes", durable=False, auto_delete=False)
        await queue.purge()

        async def take(message: aio_pika.abc.AbstractIncomingMessage) -> None:
            await message.ack()
            await received.put(message.body)

        await queue.consume(take)
        assert nodes.connected_to == f"127.0.0.1:{first.port}"

        await first.take_down()
        lost_at = time.monotonic()
        # Both reconnect to the second node; the consumer is restored there.
        async with asyncio.timeout(30):
            while not (
                consuming.failover.address == publishing.failover.address == nodes.connected_to
                and nodes.connected_to == f"127.0.0.1:{second.port}"
                and consuming.connected.is_set()
                and publishing.connected.is_set()
            ):
                await asyncio.sleep(0.05)
        out = await publishing.channel()
        await out.default_exchange.publish(aio_pika.Message(b"after"), routing_key=queue.name)
        async with asyncio.timeout(30):
            assert await received.get() == b"after"
        resumed_s = time.monotonic() - lost_at

        assert len(_moves(caplog)) == 1, _moves(caplog)
        assert f"127.0.0.1:{first.port} to 127.0.0.1:{second.port}" in _moves(caplog)[0]
        # Reconnecting waits 0.2 s between attempts: well within a few seconds.
        assert resumed_s < 10, resumed_s
    finally:
        direct_channel = await direct.channel()
        await direct_channel.queue_delete("jobrail-test-nodes")
        await _close(direct)
        await _close(publishing)
        await _close(consuming)


async def test_a_node_that_never_answers_is_left_for_the_next(
    proxies: tuple[TcpProxy, TcpProxy],
) -> None:
    """A node that accepts the socket but not the handshake (frozen, under an alarm)."""
    first, second = proxies
    first.hold_replies()
    nodes = Nodes(_url(first, second), shuffle=False)
    connection = FailoverRobustConnection(
        aio_pika.connection.make_url(_url(first)[0], reconnect_interval=0.2, fail_fast=0),
        nodes=nodes,
    )
    try:
        await asyncio.wait_for(connection.connect(timeout=1), timeout=30)
        assert nodes.connected_to == f"127.0.0.1:{second.port}"
    finally:
        first.pass_replies()
        await _close(connection)


def test_shuffled_nodes_keep_every_node_once() -> None:
    urls = [f"amqp://u:p@h{n}:5672/" for n in range(5)]
    orders = {tuple(Nodes(urls, shuffle=True).addresses) for _ in range(50)}
    assert len(orders) > 1
    assert all(sorted(order) == [f"h{n}:5672" for n in range(5)] for order in orders)
