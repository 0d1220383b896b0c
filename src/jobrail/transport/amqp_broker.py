"""The stack mode's broker: taskiq-aio-pika's, with jobrail's topology (``topology``),
publisher (``publishing``), dead-letter queue (``dead_letters``) and consumer
(``consuming``). A RabbitMQ restart is logged once (``reconnects``); with several nodes a
process uses one and moves to the next when it fails (``nodes``). Where it reaches
past taskiq-aio-pika's public API is ``internals``."""

import asyncio
import contextlib
import functools
import logging
from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence

from aio_pika.abc import AbstractChannel, AbstractRobustConnection
from taskiq import AckableMessage
from taskiq_aio_pika import AioPikaBroker

from jobrail.jobs.messages import DeadLetter
from jobrail.jobs.operator_reads import QueueDepth
from jobrail.kernel.clock import Clock, SystemClock
from jobrail.kernel.errors import BrokerUnavailableError
from jobrail.settings import RabbitSettings
from jobrail.transport import internals
from jobrail.transport.amqp_errors import CHANNEL_GONE, why
from jobrail.transport.codec import Envelope
from jobrail.transport.consuming import AmqpConsumer, Deliveries
from jobrail.transport.dead_letters import AmqpDeadLetters
from jobrail.transport.nodes import Nodes, connect_node
from jobrail.transport.publishing import AmqpPublisher
from jobrail.transport.reconnects import ConnectionWatch
from jobrail.transport.topology import (
    Topology,
    declare_dead_letter_queue,
    declare_delays,
    queue_depths,
)

log = logging.getLogger("jobrail.broker")


class AmqpJobBroker(AioPikaBroker):
    def __init__(
        self,
        settings: RabbitSettings,
        *,
        consume: Sequence[str] = (),
        clock: Clock | None = None,
    ) -> None:
        self.topology = topology = Topology.from_settings(settings)
        self._settings = settings
        clock = clock or SystemClock()
        self._node_urls = settings.node_urls()
        self.nodes = Nodes(self._node_urls, shuffle=settings.node_order == "shuffled")
        super().__init__(
            url=self._node_urls[0],
            qos=settings.prefetch,
            exchange=topology.work_exchange(),
            task_queues=topology.work_queues(quorum=settings.quorum_queues),
            dead_letter_queue=topology.dead_letter_queue_config(),
            timeout=settings.connect_timeout_s,
        )
        unknown = set(consume) - set(topology.queues)
        if unknown:
            raise ValueError(f"cannot consume unknown queues {sorted(unknown)}")
        self._consume = {topology.queues[q] for q in (consume or topology.queues)}
        self._watch = ConnectionWatch()
        self._publisher = AmqpPublisher(
            topology,
            delay_tiers_ms=settings.delay_tiers_ms,
            publish_timeout_s=settings.publish_timeout_s,
            clock=clock,
        )
        self._dead_letters = AmqpDeadLetters(topology.dead_letter_queue)
        self._consumer = AmqpConsumer(
            topology=topology,
            has_task=lambda name: self.find_task(name) is not None,
            publish=self._publisher.publish,
            clock=clock,
            watch=self._watch,
        )
        self._connection: AbstractRobustConnection | None = None
        self._gauge_channel: AbstractChannel | None = None
        self._read_channel: AbstractChannel | None = None
        self._connector: asyncio.Task[None] | None = None
        self._deliveries: Deliveries[AckableMessage] | None = None

    # -- lifecycle ---------------------------------------------------------------

    async def startup(self) -> None:
        """Connect and declare the topology.

        A worker waits for RabbitMQ, since it can do nothing without it. The API only
        tries briefly and keeps trying in the background: until it connects, enqueued
        jobs wait in the outbox and the relay publishes them.
        """
        await internals.taskiq_startup(self)
        if self.is_worker_process:
            await self._connect_until_connected()
            return
        try:
            await self._connect()
        except Exception as exc:  # noqa: BLE001 - any failure here means "not yet"
            log.warning("RabbitMQ unreachable at start-up (%s); retrying in background", why(exc))
            self._connector = asyncio.create_task(self._connect_until_connected())

    async def shutdown(self) -> None:
        self._watch.stopping()
        if self._connector is not None:
            self._connector.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._connector
        with contextlib.suppress(Exception):
            await self._publisher.close()
        await super().shutdown()

    async def _connect_until_connected(self) -> None:
        delay = 0.5
        while True:
            try:
                await self._connect()
            except Exception as exc:  # noqa: BLE001
                log.warning("RabbitMQ unreachable (%s); retrying in %.1fs", why(exc), delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 10.0)
            else:
                log.info("connected to RabbitMQ")
                return

    async def _connect(self) -> None:
        # Both connections on the node the process is on, moving on together (see nodes).
        connect = functools.partial(
            connect_node,
            self.nodes,
            self._node_urls[0],
            timeout=self._settings.connect_timeout_s,
            reconnect_interval=self._settings.reconnect_interval_s,
        )
        write = await connect()
        read = None
        try:
            write_channel = await write.channel()
            read_channel = None
            if self.is_worker_process:
                read = await connect()
                read_channel = await read.channel()
            internals.attach_connections(
                self, write=write, write_channel=write_channel, read=read, read_channel=read_channel
            )
            self._watch.watch(write, "publishing connection")
            if read is not None:
                self._watch.watch(read, "consuming connection")
            await self._declare(write, write_channel)
            await self._publisher.open(write)
            self._connection, self._read_channel = write, read_channel
        except BaseException:
            for connection in (read, write):
                if connection is not None:
                    with contextlib.suppress(Exception):
                        await connection.close()
            raise

    async def _declare(
        self, connection: AbstractRobustConnection, channel: AbstractChannel
    ) -> None:
        quorum = self._settings.quorum_queues
        # Declared with an explicit delivery limit, and kept as it is when an older
        # deployment declared it without one (see jobrail.transport.topology).
        scannable = await declare_dead_letter_queue(
            connection, channel, self.topology.dead_letter_queue, quorum=quorum
        )
        await internals.declare_exchanges(self)
        await internals.declare_queues(self, channel)
        await declare_delays(channel, self.topology, quorum=quorum)
        self._dead_letters.attach(connection, scannable=scannable)

    # -- publishing and the queues, for operators ----------------------------------

    @property
    def is_connected(self) -> bool:
        return self._publisher.is_open

    async def publish(self, envelope: Envelope) -> None:
        """Publish with a publisher confirm; raise BrokerUnavailableError if not confirmed."""
        await self._publisher.publish(envelope)

    async def publish_many(
        self, envelopes: Sequence[Envelope], timeout_s: float | None = None
    ) -> list[BaseException | None]:
        """Publish in one write, each with its confirm (see AmqpPublisher.publish_many)."""
        return await self._publisher.publish_many(envelopes, timeout_s)

    async def ready(self, queue: str) -> int:
        """A passive declare on a channel kept for it (the dispatcher asks every pass)."""
        channel = self._gauge_channel
        try:
            async with asyncio.timeout(self._settings.publish_timeout_s):
                if channel is None or channel.is_closed:
                    if self._connection is None or self._connection.is_closed:
                        raise BrokerUnavailableError("not connected to RabbitMQ")
                    channel = self._gauge_channel = await self._connection.channel()
                # The driver's channel: aio-pika's declare_queue on a robust channel hands
                # back the queue it declared first, with that first declare's count.
                raw = await channel.get_underlay_channel()
                declared = await raw.queue_declare(self.topology.queues[queue], passive=True)
        except (*CHANNEL_GONE, TimeoutError) as exc:
            self._gauge_channel = None
            raise BrokerUnavailableError(f"queue {queue}: {why(exc)}") from exc
        return declared.message_count or 0

    async def queue_depths(self) -> list[QueueDepth]:
        return await queue_depths(
            self._connection, self.topology, timeout_s=self._settings.publish_timeout_s
        )

    @property
    def safe_to_scan(self) -> bool:
        """Whether the DLQ was declared with its explicit delivery limit here (False for
        an older one kept without it: each look counts towards RabbitMQ 4's default)."""
        return self._dead_letters.safe_to_scan

    async def peek_dead_letters(self, limit: int) -> list[DeadLetter]:
        return await self._dead_letters.peek(limit)

    async def settle_dead_letters(
        self, decide: Callable[[DeadLetter], Awaitable[bool]], limit: int
    ) -> None:
        await self._dead_letters.settle(decide, limit)

    async def purge_dead_letters(self) -> int:
        return await self._dead_letters.purge()

    # -- consuming ---------------------------------------------------------------

    async def listen(self) -> AsyncGenerator[AckableMessage, None]:
        channel = self._read_channel
        if channel is None:
            raise RuntimeError("startup() must run before listen()")
        await channel.set_qos(prefetch_count=self._settings.prefetch)
        declared = await internals.declare_queues(self, channel)
        queues = [queue for queue in declared if queue.name in self._consume]
        log.info("consuming %s", ", ".join(sorted(q.name for q in queues)))
        deliveries = Deliveries(self._consumer.consume(q) for q in queues)
        self._deliveries = deliveries
        try:
            async for message in deliveries:
                yield message
        finally:
            self._deliveries = None
            await deliveries.close()

    def take_ready(self, limit: int) -> list[AckableMessage]:
        """Up to `limit` deliveries that have arrived and that `listen` has not yielded
        yet (for the worker's receiver to start together with the one it yielded)."""
        return self._deliveries.take_ready(limit) if self._deliveries is not None else []
