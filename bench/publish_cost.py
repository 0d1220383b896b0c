"""CPU per confirmed publish: aio-pika's `Exchange.publish` against the calls jobrail
makes (`jobrail.transport.publishing.publish_confirmed`: aiormq's `basic_publish` with
`wait=False`, for one message; `jobrail.transport.internals.publish_batch`, for the
fast path's batches), side by side on one channel with publisher confirms, 32 publishes
at a time, persistent and mandatory, as the API's and the worker's publishes are.

python -m bench.publish_cost
"""

import asyncio
import functools
import time
import uuid
from collections.abc import Awaitable, Callable

import aio_pika
from aiormq import spec

from bench.common import AMQP_URL
from jobrail.transport.internals import Outbound, publish_batch
from jobrail.transport.publishing import publish_confirmed

COUNT = 6000
AT_ONCE = 32
ROUNDS = 3
BODY = b'{"task_id": "' + b"x" * 300 + b'"}'


async def run() -> dict[str, float]:
    connection = await aio_pika.connect(AMQP_URL)
    try:
        channel = await connection.channel(publisher_confirms=True, on_return_raises=True)
        queue = await channel.declare_queue(
            f"bench.publish.{uuid.uuid4().hex}", auto_delete=True, arguments={"x-max-length": 100}
        )
        exchange = channel.default_exchange

        async def aio_pika_publish(n: int) -> None:
            message = aio_pika.Message(
                body=BODY,
                headers={"h": "v"},
                delivery_mode=aio_pika.DeliveryMode.PERSISTENT,
                message_id=str(n),
            )
            async with asyncio.timeout(10):
                await exchange.publish(message, routing_key=queue.name, mandatory=True)

        underlay = await channel.get_underlay_channel()

        async def jobrail_publish(n: int) -> None:
            properties = spec.Basic.Properties(
                delivery_mode=2, headers={"h": "v"}, message_id=str(n)
            )
            async with asyncio.timeout(10):
                await publish_confirmed(underlay, BODY, "", queue.name, properties)

        async def one_by_one(publish: Callable[[int], Awaitable[None]], first: int) -> None:
            await asyncio.gather(*(publish(n) for n in range(first, first + AT_ONCE)))

        async def jobrail_batch(first: int) -> None:
            batch = [
                Outbound(
                    BODY,
                    "",
                    queue.name,
                    spec.Basic.Properties(delivery_mode=2, headers={"h": "v"}, message_id=str(n)),
                )
                for n in range(first, first + AT_ONCE)
            ]
            outcomes = await publish_batch(underlay, batch, 10)
            assert outcomes == [None] * AT_ONCE

        ways: dict[str, Callable[[int], Awaitable[None]]] = {
            "aio-pika": functools.partial(one_by_one, aio_pika_publish),
            "jobrail": functools.partial(one_by_one, jobrail_publish),
            "jobrail batch": jobrail_batch,
        }
        cpu: dict[str, list[float]] = {name: [] for name in ways}
        for _ in range(ROUNDS):  # interleaved, so that a noisy neighbour hits each
            for name, publish_32 in ways.items():
                started = time.process_time()
                for first in range(0, COUNT, AT_ONCE):
                    await publish_32(first)
                cpu[name].append((time.process_time() - started) / COUNT * 1e6)
    finally:
        await connection.close()
    return {name: round(min(values), 1) for name, values in cpu.items()}


def main() -> None:
    result = asyncio.run(run())
    aio_pika_us = result["aio-pika"]
    print(
        f"CPU per confirmed publish: aio-pika {aio_pika_us} us, "
        f"jobrail one by one {result['jobrail']} us ({result['jobrail'] / aio_pika_us:.2f}x), "
        f"jobrail batch of {AT_ONCE} {result['jobrail batch']} us "
        f"({result['jobrail batch'] / aio_pika_us:.2f}x)"
    )


if __name__ == "__main__":
    main()
