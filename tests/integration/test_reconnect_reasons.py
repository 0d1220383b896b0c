"""A real aio-pika connection that loses RabbitMQ (through this test's own proxy, which
then refuses connections): each refused attempt is demoted, and the reminder that the
connection is still down says why the last attempt failed, without the password.
RabbitMQ itself is not touched."""

import asyncio
import logging
import time

import aio_pika
import pytest

from jobrail.telemetry.logging import ExpectedReconnectFilter
from jobrail.transport.reconnects import ConnectionWatch
from tests.support.services import require
from tests.support.tcp_proxy import TcpProxy


def reminders(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "jobrail.broker" and r.getMessage().startswith("still no connection")
    ]


async def test_refused_attempts_are_demoted_and_the_reminder_says_why(
    caplog: pytest.LogCaptureFixture,
) -> None:
    require("rabbitmq")
    for name in ("jobrail.broker", "aio_pika", "aiormq"):
        caplog.set_level(logging.INFO, name)
    async with TcpProxy(5672) as proxy:
        connection = await aio_pika.connect_robust(
            f"amqp://guest:guest@127.0.0.1:{proxy.port}/", reconnect_interval=0.2
        )
        watch = ConnectionWatch(still_down_every=0.5)
        watch.watch(connection, "test connection")
        outage = asyncio.create_task(proxy.cut(down_s=600))
        try:
            deadline = time.monotonic() + 60
            while not any("Connect call failed" in line for line in reminders(caplog)):
                assert time.monotonic() < deadline, reminders(caplog)
                await asyncio.sleep(0.05)
        finally:
            outage.cancel()
            watch.stopping()
            await connection.close()

    reminder = next(line for line in reminders(caplog) if "Connect call failed" in line)
    assert "(last attempt: test connection: AMQPConnectionError: " in reminder
    assert "(from ConnectionRefusedError: " in reminder
    assert "guest:guest" not in reminder
    attempts = [
        r
        for r in caplog.records
        if r.name in ("aio_pika.robust_connection", "aiormq.connection")
        and r.levelno >= logging.WARNING
        and ("Connection attempt" in str(r.msg) or "creating transport" in str(r.msg))
    ]
    assert attempts
    for record in attempts:
        ExpectedReconnectFilter().filter(record)
    assert {r.levelname for r in attempts} == {"INFO"}
