"""The transport's floor: persistent publishes with confirms, consumed and acked."""

import asyncio
import time

import aio_pika

from bench.common import AMQP_URL, unique


async def run(messages: int = 20_000, window: int = 500) -> float:
    queue_name = unique("bench.raw.")
    producer = await aio_pika.connect(AMQP_URL)
    consumer = await aio_pika.connect(AMQP_URL)
    try:
        pub_channel = await producer.channel(publisher_confirms=True)
        queue = await pub_channel.declare_queue(
            queue_name, durable=True, arguments={"x-queue-type": "quorum"}
        )
        sub_channel = await consumer.channel()
        await sub_channel.set_qos(prefetch_count=256)
        sub_queue = await sub_channel.get_queue(queue_name)
        done = asyncio.Event()
        received = 0

        async def on_message(message: aio_pika.abc.AbstractIncomingMessage) -> None:
            nonlocal received
            await message.ack()
            received += 1
            if received == messages:
                done.set()

        await sub_queue.consume(on_message)
        body = b'{"task_id":"x","task_name":"noop","labels":{},"args":[],"kwargs":{}}'
        started = time.perf_counter()
        for first in range(0, messages, window):
            await asyncio.gather(
                *(
                    pub_channel.default_exchange.publish(
                        aio_pika.Message(body, delivery_mode=aio_pika.DeliveryMode.PERSISTENT),
                        routing_key=queue_name,
                    )
                    for _ in range(min(window, messages - first))
                )
            )
        await asyncio.wait_for(done.wait(), timeout=120)
        elapsed = time.perf_counter() - started
        await queue.delete(if_unused=False, if_empty=False)
        return messages / elapsed
    finally:
        await consumer.close()
        await producer.close()


if __name__ == "__main__":
    print(f"{asyncio.run(run()):.0f} msgs/s")
