"""The two Taskiq brokers jobrail runs on, each composed of the messaging adapters.

Both publish ``Envelope``s (with delays and dead letters), keep a dead-letter queue for
operators, and refuse to run what is not a job message (`jobrail.transport.screening`):

- ``AmqpJobBroker`` (stack mode) is taskiq-aio-pika's broker with jobrail's topology
  (``topology``), publisher (``publishing``), dead-letter queue (``dead_letters``) and
  consumer (``consuming``). A RabbitMQ restart is logged once (``reconnects``). Where it
  reaches past taskiq-aio-pika's public API is ``taskiq_aio_pika_internals``.
- ``EmbeddedJobBroker`` (embedded mode) is Taskiq's in-memory broker: tasks run in the
  same process; delays are timers; dead letters stay in memory.
"""

import asyncio
import contextlib
import functools
import logging
from collections import Counter
from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence
from typing import Any, Protocol, cast

import aio_pika
from aio_pika.abc import AbstractChannel, AbstractRobustConnection
from taskiq import AckableMessage, InMemoryBroker
from taskiq_aio_pika import AioPikaBroker

from jobrail.jobs.messages import DeadLetter
from jobrail.jobs.operator_reads import QueueDepth
from jobrail.kernel.clock import Clock, SystemClock
from jobrail.settings import RabbitSettings
from jobrail.transport import taskiq_aio_pika_internals as internals
from jobrail.transport.amqp_errors import why
from jobrail.transport.codec import Envelope, dead_letter
from jobrail.transport.consuming import AmqpConsumer, Deliveries
from jobrail.transport.dead_letters import AmqpDeadLetters, MemoryDeadLetters
from jobrail.transport.frames import CoalescingRobustConnection
from jobrail.transport.publishing import AmqpPublisher, MemoryPublisher
from jobrail.transport.reconnects import ConnectionWatch
from jobrail.transport.screening import Refuse, ScreenedMessage, screen
from jobrail.transport.topology import (
    Topology,
    declare_dead_letter_queue,
    declare_delays,
    queue_depths,
)

log = logging.getLogger("jobrail.broker")


def _settled() -> None:
    """An in-memory delivery's acknowledgement: there is nothing to tell a broker."""


class JobBroker(Protocol):
    """What the platform needs of a broker beyond Taskiq's own interface."""

    topology: Topology

    @property
    def is_connected(self) -> bool: ...

    @property
    def safe_to_scan(self) -> bool: ...

    async def publish(self, envelope: Envelope) -> None: ...

    async def publish_many(
        self, envelopes: Sequence[Envelope], timeout_s: float | None = None
    ) -> Sequence[BaseException | None]: ...

    async def queue_depths(self) -> list[QueueDepth]:
        """Messages ready and consumers of every work queue and of the dead-letter
        queue; raises BrokerUnavailableError when the broker cannot be asked."""
        ...

    async def peek_dead_letters(self, limit: int) -> list[DeadLetter]: ...

    async def settle_dead_letters(
        self, decide: Callable[[DeadLetter], Awaitable[bool]], limit: int
    ) -> None: ...

    async def purge_dead_letters(self) -> int: ...


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
        super().__init__(
            url=settings.url.get_secret_value(),
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
        connect = functools.partial(
            aio_pika.connect_robust,
            self._settings.url.get_secret_value(),
            timeout=self._settings.connect_timeout_s,
            reconnect_interval=self._settings.reconnect_interval_s,
            # The frames written in one loop turn go out in one write (see frames).
            connection_class=CoalescingRobustConnection,
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


class EmbeddedJobBroker(InMemoryBroker):
    """Taskiq's in-memory broker with delays and an in-memory dead-letter queue.

    At most `max_running` jobs run at once (the worker's ``max_async_tasks``, which
    bounds a worker process as a whole); the others wait in memory, unclaimed, for a
    slot, in the order they came. Taskiq's receiver bounds what its own listen loop
    starts, and this broker has none: it starts each delivery itself.
    """

    def __init__(
        self,
        settings: RabbitSettings,
        *,
        max_running: int = 128,
        shutdown_grace_s: float = 30.0,
        clock: Clock | None = None,
    ) -> None:
        super().__init__(max_async_tasks=max_running)
        self._slots = asyncio.Semaphore(max_running)
        self._waiting: Counter[str] = Counter()  # per queue, deliveries without a slot
        self._started: set[asyncio.Task[Any]] = set()
        self._closing = False
        self._hurried = False
        self._hurry_waiter: asyncio.Future[None] | None = None
        self.topology = Topology.from_settings(settings)
        self._shutdown_grace_s = shutdown_grace_s
        self._settings = settings
        self._clock = clock or SystemClock()
        self._dead_letters = MemoryDeadLetters(settings.dead_letter_queue)
        self._publisher = MemoryPublisher(
            queues=settings.queues,
            dead_letters=self._dead_letters,
            deliver=self._deliver,
            clock=self._clock,
        )

    @property
    def is_connected(self) -> bool:
        return True

    @property
    def safe_to_scan(self) -> bool:
        return True  # an in-memory list: looking drops nothing

    async def publish(self, envelope: Envelope) -> None:
        await self._publisher.publish(envelope)

    async def publish_many(
        self, envelopes: Sequence[Envelope], timeout_s: float | None = None
    ) -> list[BaseException | None]:
        return await self._publisher.publish_many(envelopes, timeout_s)

    def _deliver(self, envelope: Envelope) -> None:
        verdict = screen(envelope.body, lambda name: self.find_task(name) is not None)
        if isinstance(verdict, Refuse):
            log.warning("dead-lettering message %s: %s", envelope.id, verdict.reason)
            self._dead_letters.append(
                dead_letter(
                    body=envelope.body,
                    reason=verdict.reason,
                    source_queue=envelope.queue,
                    dead_letter_queue=self._settings.dead_letter_queue,
                    at=self._clock.now(),
                    message_id=envelope.message_id,
                )
            )
            return
        if self._closing:
            # Its job stays unfinished in the database: it resumes when the process
            # starts again (jobrail.runtime.bootstrap.resume_unfinished_jobs).
            log.debug("shutting down: message %s not started", envelope.id)
            return
        self._waiting[envelope.queue] += 1
        # Decoded once: the receiver (jobrail.transport.receiver) runs the job message
        # the screening made. An in-memory delivery has nothing to acknowledge.
        message = ScreenedMessage(data=verdict.body, ack=_settled, job=verdict.message)
        task = asyncio.create_task(self._run(message, envelope.queue))
        self._running_tasks.add(task)
        task.add_done_callback(self._running_tasks.discard)

    async def _run(self, message: ScreenedMessage, queue: str) -> None:
        try:
            await self._slots.acquire()
        finally:
            self._waiting[queue] -= 1
        try:
            if self._closing:
                return
            task = cast(asyncio.Task[Any], asyncio.current_task())
            self._started.add(task)
            try:
                await self.receiver.callback(message=message)
            except Exception:
                # The runner records a job's own failures; this is one before or after
                # it (the database gone mid-claim): the job stays unfinished, and
                # resumes when the process starts again.
                log.exception("job %s: its message failed outside the runner", message.job.job_id)
            finally:
                self._started.discard(task)
        finally:
            self._slots.release()

    async def queue_depths(self) -> list[QueueDepth]:
        """Ready: the deliveries of a queue waiting for a slot, and on the default
        queue the delayed ones too (which wait on a timer); the DLQ is its in-memory
        list."""
        delayed = self._publisher.delayed
        default = self._settings.default_queue
        return [
            *(
                QueueDepth(queue, self._waiting[queue] + (delayed if queue == default else 0), 1)
                for queue in self._settings.queues
            ),
            QueueDepth(self._settings.dead_letter_queue, len(self._dead_letters), 0),
        ]

    async def peek_dead_letters(self, limit: int) -> list[DeadLetter]:
        return await self._dead_letters.peek(limit)

    async def settle_dead_letters(
        self, decide: Callable[[DeadLetter], Awaitable[bool]], limit: int
    ) -> None:
        await self._dead_letters.settle(decide, limit)

    async def purge_dead_letters(self) -> int:
        return await self._dead_letters.purge()

    async def shutdown(self) -> None:
        """Let running jobs finish within the grace period, then stop the rest: they stay
        claimed in the database and resume after their lease when the process restarts.
        Jobs still waiting for a slot are dropped at once (they stay pending in the
        database, and resume when the process restarts), and so is every message sent
        from now on (a retry's, a chain's next step)."""
        self._closing = True
        self._publisher.cancel_delayed()
        waiting = [task for task in self._running_tasks if task not in self._started]
        for task in waiting:
            task.cancel()
        if waiting:
            await asyncio.wait(waiting)
        running = set(self._running_tasks)  # no task starts any more
        if running:
            unfinished = await self._finished_within_grace(running)
            for task in unfinished:
                task.cancel()
            if unfinished:
                log.warning("stopped %d unfinished jobs at shutdown", len(unfinished))
                await asyncio.wait(unfinished, timeout=5)
        await super().shutdown()

    def hurry(self) -> None:
        """A forced stop: running jobs get no grace period (at once if the shutdown waits
        for them now, else when it comes). They stay claimed in the database and resume
        after their lease when the process restarts, as those past the grace do."""
        self._hurried = True
        if self._hurry_waiter is not None and not self._hurry_waiter.done():
            self._hurry_waiter.set_result(None)

    async def _finished_within_grace(
        self, running: set[asyncio.Task[Any]]
    ) -> set[asyncio.Task[Any]]:
        """Wait for `running` within the grace period, or until `hurry`; the unfinished."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._shutdown_grace_s
        self._hurry_waiter = hurried = loop.create_future()
        pending: set[asyncio.Future[Any]] = set(running)
        while pending and not self._hurried and (left := deadline - loop.time()) > 0:
            _done, pending = await asyncio.wait(
                pending | {hurried}, timeout=left, return_when=asyncio.FIRST_COMPLETED
            )
            pending.discard(hurried)
        self._hurry_waiter = None
        return {task for task in running if not task.done()}
