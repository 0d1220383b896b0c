"""CPU per confirmed publish: aio-pika's `Exchange.publish` against the call jobrail makes
(`jobrail.messaging.publishing.publish_confirmed`: aiormq's `basic_publish` with
`wait=False`), side by side on one channel with publisher confirms, 32 publishes at a
time, persistent and mandatory, as the API's and the worker's publishes are.

python -m bench.publish_cost
"""

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable

import aio_pika
from aiormq import spec

from bench.common import AMQP_URL
from jobrail.messaging.publishing import publish_confirmed

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

        cpu: dict[str, list[float]] = {"aio-pika": [], "jobrail": []}
        ways: dict[str, Callable[[int], Awaitable[None]]] = {
            "aio-pika": aio_pika_publish,
            "jobrail": jobrail_publish,
        }
        for _ in range(ROUNDS):  # interleaved, so that a noisy neighbour hits both
            for name, publish in ways.items():
                started = time.process_time()
                for first in range(0, COUNT, AT_ONCE):
                    await asyncio.gather(*(publish(n) for n in range(first, first + AT_ONCE)))
                cpu[name].append((time.process_time() - started) / COUNT * 1e6)
    finally:
        await connection.close()
    return {name: round(min(values), 1) for name, values in cpu.items()}


def main() -> None:
    result = asyncio.run(run())
    ratio = result["jobrail"] / result["aio-pika"]
    print(
        f"CPU per confirmed publish: aio-pika {result['aio-pika']} us, "
        f"jobrail {result['jobrail']} us ({ratio:.2f}x)"
    )


if __name__ == "__main__":
    main()
