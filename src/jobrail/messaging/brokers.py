"""The two Taskiq brokers jobrail runs on, and what it adds to them.

Both publish ``Envelope``s (with delays and dead letters) and refuse to run what
is not a job message:

- ``AmqpJobBroker`` (stack mode) is taskiq-aio-pika's broker with jobrail's
  topology: durable quorum work queues, ``jobs.dlq``, the delay tiers, publisher
  confirms, and a consumer that sends unparseable messages to ``jobs.dlq`` with
  their reason instead of dropping them, and a job of a type it has no task for to
  the unknown-type task, which fails the job with why (Taskiq acknowledges and
  forgets both). A RabbitMQ restart is logged once (``messaging/reconnects.py``), and
  an acknowledgement its closed channels refuse is counted there, not raised.
- ``EmbeddedJobBroker`` (embedded mode) is Taskiq's in-memory broker: tasks run in
  the same process; delays are timers; dead letters stay in memory.
"""

import asyncio
import contextlib
import functools
import logging
from collections import deque
from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence
from typing import Any, Protocol

import aio_pika
import aiormq
from aio_pika.abc import AbstractChannel, AbstractExchange, AbstractIncomingMessage, AbstractQueue
from aio_pika.exceptions import ChannelInvalidStateError
from taskiq import AckableMessage, AsyncBroker, InMemoryBroker
from taskiq_aio_pika import AioPikaBroker, Exchange, Queue, QueueType
from taskiq_aio_pika.utils import merge_async_iterables

from jobrail.jobs.messages import DeadLetter
from jobrail.jobs.ports import BrokerUnavailableError, QueueDepth
from jobrail.kernel.clock import Clock, SystemClock
from jobrail.messaging.codec import (
    UNKNOWN_TYPE_TASK,
    Envelope,
    MalformedMessageError,
    dead_letter,
    decode,
    describe_dead_letter,
    reroute_unknown_type,
)
from jobrail.messaging.reconnects import ConnectionWatch
from jobrail.messaging.topology import (
    DELAY_HEADER,
    Topology,
    declare_dead_letter_queue,
    pick_tier,
    tier_label,
)
from jobrail.settings import RabbitSettings

log = logging.getLogger("jobrail.broker")

# A message that keeps killing its consumer is dead-lettered by RabbitMQ after this
# many deliveries (quorum queues count them).
DELIVERY_LIMIT = 20
# What an operation on a channel or connection that has closed raises (aio-pika, aiormq).
_CHANNEL_GONE = (
    ChannelInvalidStateError,
    aiormq.exceptions.AMQPError,
    ConnectionError,
    RuntimeError,
)


def _channel_closed(message: AbstractIncomingMessage, exc: Exception) -> bool:
    """Whether an ack failed because the message's channel or connection has closed."""
    if isinstance(
        exc,
        (
            ChannelInvalidStateError,
            aiormq.exceptions.ChannelClosed,
            aiormq.exceptions.ConnectionClosed,
            ConnectionError,
        ),
    ):
        return True
    try:
        return bool(message.channel.is_closed)
    except ChannelInvalidStateError:  # what aio-pika raises for a closed channel
        return True


class JobBroker(Protocol):
    """What the platform needs of a broker beyond Taskiq's own interface."""

    topology: Topology

    @property
    def is_connected(self) -> bool: ...

    @property
    def safe_to_scan(self) -> bool: ...

    async def publish(self, envelope: Envelope) -> None: ...

    async def queue_depths(self) -> list[QueueDepth]:
        """Messages ready and consumers of every work queue and of the dead-letter
        queue; raises BrokerUnavailableError when the broker cannot be asked."""
        ...

    async def peek_dead_letters(self, limit: int) -> list[DeadLetter]: ...

    async def settle_dead_letters(
        self, decide: Callable[[DeadLetter], Awaitable[bool]], limit: int
    ) -> None: ...

    async def purge_dead_letters(self) -> int: ...


def _delay_ms(envelope: Envelope, clock: Clock) -> float:
    if envelope.not_before is None:
        return 0.0
    return (envelope.not_before - clock.now()).total_seconds() * 1000


class AmqpJobBroker(AioPikaBroker):
    def __init__(
        self,
        settings: RabbitSettings,
        *,
        consume: Sequence[str] = (),
        clock: Clock | None = None,
    ) -> None:
        self.topology = Topology.from_settings(settings)
        self._settings = settings
        self._clock = clock or SystemClock()
        queue_type = QueueType.QUORUM if settings.quorum_queues else QueueType.CLASSIC
        work_arguments: dict[str, Any] = (
            {"x-delivery-limit": DELIVERY_LIMIT} if settings.quorum_queues else {}
        )
        super().__init__(
            url=settings.url.get_secret_value(),
            qos=settings.prefetch,
            exchange=Exchange(name=self.topology.exchange, type=aio_pika.ExchangeType.DIRECT),
            task_queues=[
                Queue(name=name, type=queue_type, arguments=work_arguments)
                for name in self.topology.queues.values()
            ],
            dead_letter_queue=Queue(name=self.topology.dead_letter_queue, type=queue_type),
            timeout=settings.connect_timeout_s,
        )
        unknown = set(consume) - set(self.topology.queues)
        if unknown:
            raise ValueError(f"cannot consume unknown queues {sorted(unknown)}")
        self._consume = {self.topology.queues[q] for q in (consume or self.topology.queues)}
        self._publish_channel: AbstractChannel | None = None
        self._work_exchange: AbstractExchange | None = None
        self._delay_exchange: AbstractExchange | None = None
        self._connector: asyncio.Task[None] | None = None
        self._watch = ConnectionWatch()
        # Whether the DLQ has its explicit delivery limit (see `safe_to_scan`).
        self._dead_letter_limit_declared = False

    # -- lifecycle ---------------------------------------------------------------

    async def startup(self) -> None:
        """Connect and declare the topology.

        A worker waits for RabbitMQ, since it can do nothing without it. The API only
        tries briefly and keeps trying in the background: until it connects, enqueued
        jobs wait in the outbox and the relay publishes them.
        """
        await AsyncBroker.startup(self)
        if self.is_worker_process:
            await self._connect_until_connected()
            return
        try:
            await self._connect()
        except Exception as exc:  # noqa: BLE001 - any failure here means "not yet"
            log.warning("RabbitMQ unreachable at start-up (%s); retrying in background", _why(exc))
            self._connector = asyncio.create_task(self._connect_until_connected())

    async def shutdown(self) -> None:
        self._watch.stopping()
        if self._connector is not None:
            self._connector.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._connector
        if self._publish_channel is not None:
            with contextlib.suppress(Exception):
                await self._publish_channel.close()
        await super().shutdown()

    async def _connect_until_connected(self) -> None:
        delay = 0.5
        while True:
            try:
                await self._connect()
            except Exception as exc:  # noqa: BLE001
                log.warning("RabbitMQ unreachable (%s); retrying in %.1fs", _why(exc), delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 10.0)
            else:
                log.info("connected to RabbitMQ")
                return

    async def _connect(self) -> None:
        url = self._settings.url.get_secret_value()
        timeout = self._settings.connect_timeout_s
        write_conn = await aio_pika.connect_robust(url, timeout=timeout)
        read_conn = None
        try:
            write_channel = await write_conn.channel()
            if self.is_worker_process:
                read_conn = await aio_pika.connect_robust(url, timeout=timeout)
            self.write_conn, self.write_channel = write_conn, write_channel
            self._watch.watch(write_conn, "publishing connection")
            if read_conn is not None:
                self.read_conn = read_conn
                self.read_channel = await read_conn.channel()
                self._watch.watch(read_conn, "consuming connection")
            await self._declare_exchanges()
            await self._declare_queues(write_channel)
            await self._declare_jobrail_topology(write_channel)
            channel = await write_conn.channel(publisher_confirms=True, on_return_raises=True)
            self._work_exchange = await channel.get_exchange(self.topology.exchange, ensure=False)
            self._delay_exchange = await channel.get_exchange(
                self.topology.delay_exchange, ensure=False
            )
            self._publish_channel = channel
        except BaseException:
            for connection in (read_conn, write_conn):
                if connection is not None:
                    with contextlib.suppress(Exception):
                        await connection.close()
            raise

    async def _declare_dead_letter_queue(self, channel: AbstractChannel) -> None:
        # Declared with an explicit delivery limit, and kept as it is when an older
        # deployment declared it without one (see jobrail.messaging.topology).
        assert self.write_conn is not None
        self._dead_letter_limit_declared = await declare_dead_letter_queue(
            self.write_conn,
            channel,
            self.topology.dead_letter_queue,
            quorum=self._settings.quorum_queues,
        )

    async def _declare_jobrail_topology(self, channel: AbstractChannel) -> None:
        topology = self.topology
        dlq = await channel.get_queue(topology.dead_letter_queue, ensure=False)
        await dlq.bind(topology.exchange, routing_key=topology.dead_letter_queue)
        delay_exchange = await channel.declare_exchange(
            topology.delay_exchange, type=aio_pika.ExchangeType.HEADERS, durable=True
        )
        for tier_ms, name in topology.delay_queues.items():
            arguments: dict[str, Any] = {
                "x-message-ttl": tier_ms,
                "x-dead-letter-exchange": topology.exchange,
            }
            if self._settings.quorum_queues:
                arguments |= {
                    "x-queue-type": "quorum",
                    # Expired messages must not be lost on their way back.
                    "x-dead-letter-strategy": "at-least-once",
                    "x-overflow": "reject-publish",
                }
            queue = await channel.declare_queue(name, durable=True, arguments=arguments)
            await queue.bind(
                delay_exchange,
                routing_key="",
                arguments={"x-match": "all", DELAY_HEADER: tier_label(tier_ms)},
            )

    # -- publishing --------------------------------------------------------------

    @property
    def is_connected(self) -> bool:
        channel = self._publish_channel
        return channel is not None and not channel.is_closed

    async def publish(self, envelope: Envelope) -> None:
        """Publish with a publisher confirm; raise BrokerUnavailableError if not confirmed."""
        channel, work, delay = self._publish_channel, self._work_exchange, self._delay_exchange
        if channel is None or channel.is_closed or work is None or delay is None:
            raise BrokerUnavailableError("not connected to RabbitMQ")
        try:
            routing_key = self.topology.physical(envelope.queue)
        except ValueError as exc:
            raise BrokerUnavailableError(str(exc)) from exc
        headers: dict[str, Any] = dict(envelope.headers)
        tier = pick_tier(_delay_ms(envelope, self._clock), self._settings.delay_tiers_ms)
        exchange = work
        if tier is not None:
            headers[DELAY_HEADER] = tier_label(tier)
            exchange = delay
        message = aio_pika.Message(
            body=envelope.body,
            headers=headers,
            delivery_mode=aio_pika.DeliveryMode.PERSISTENT,
            message_id=envelope.message_id,
        )
        try:
            async with asyncio.timeout(self._settings.publish_timeout_s):
                await exchange.publish(message, routing_key=routing_key, mandatory=True)
        except (*_CHANNEL_GONE, TimeoutError) as exc:
            raise BrokerUnavailableError(f"publish to {routing_key} failed: {_why(exc)}") from exc

    async def queue_depths(self) -> list[QueueDepth]:
        connection = self.write_conn
        if connection is None or connection.is_closed:
            raise BrokerUnavailableError("not connected to RabbitMQ")
        names = {
            **self.topology.queues,
            self._settings.dead_letter_queue: self.topology.dead_letter_queue,
        }
        depths = []
        try:
            # A channel of its own: a passive declare of a missing queue closes it.
            async with asyncio.timeout(self._settings.publish_timeout_s):
                async with connection.channel() as channel:
                    for logical, physical in names.items():
                        queue = await channel.declare_queue(physical, passive=True)
                        result = queue.declaration_result
                        depths.append(
                            QueueDepth(
                                logical, result.message_count or 0, result.consumer_count or 0
                            )
                        )
        except (*_CHANNEL_GONE, TimeoutError) as exc:
            raise BrokerUnavailableError(f"queue depths: {_why(exc)}") from exc
        return depths

    # -- the dead-letter queue, for operators ------------------------------------------

    @property
    def safe_to_scan(self) -> bool:
        """Whether the DLQ was declared with its explicit delivery limit here (False for
        an older one kept without it: each look counts towards RabbitMQ 4's default)."""
        return self._dead_letter_limit_declared

    async def peek_dead_letters(self, limit: int) -> list[DeadLetter]:
        seen: list[DeadLetter] = []

        async def look(letter: DeadLetter) -> bool:
            seen.append(letter)
            return False

        await self.settle_dead_letters(look, limit)
        return seen

    async def settle_dead_letters(
        self, decide: Callable[[DeadLetter], Awaitable[bool]], limit: int
    ) -> None:
        """Gets up to `limit` messages without acknowledging them, acknowledges those
        `decide` lets go, and closes the channel: RabbitMQ puts the rest back, in order.
        (Quorum queues count each such look as a delivery: the DLQ's delivery limit is
        set to never, see jobrail.messaging.topology.)

        Only the letters waiting when it starts are looked at: one that arrives during
        the pass (a job it redrove failing again at once) is left for the next pass."""
        async with self._open_dead_letters() as queue:
            waiting = int(queue.declaration_result.message_count or 0)
            for _ in range(min(limit, waiting)):
                message = await queue.get(no_ack=False, fail=False)
                if message is None:
                    break
                letter = describe_dead_letter(
                    message.message_id or "", message.body, message.headers or {}
                )
                if await decide(letter):
                    await message.ack()

    async def purge_dead_letters(self) -> int:
        """Delete every dead letter waiting in the DLQ; return how many went."""
        async with self._open_dead_letters() as queue:
            purged = await queue.purge()
        return int(purged.message_count or 0)

    @contextlib.asynccontextmanager
    async def _open_dead_letters(self) -> AsyncGenerator[AbstractQueue, None]:
        """The DLQ (declared passively, so its depth is known) on a channel of its own,
        closed afterwards; RabbitMQ being away is BrokerUnavailableError."""
        connection = self.write_conn
        if connection is None or connection.is_closed:
            raise BrokerUnavailableError("not connected to RabbitMQ")
        try:
            async with connection.channel() as channel:
                yield await channel.get_queue(self.topology.dead_letter_queue, ensure=True)
        except _CHANNEL_GONE as exc:
            raise BrokerUnavailableError(f"dead-letter queue: {_why(exc)}") from exc

    # -- consuming ---------------------------------------------------------------

    async def listen(self) -> AsyncGenerator[AckableMessage, None]:
        if self.read_channel is None:
            raise RuntimeError("startup() must run before listen()")
        await self.read_channel.set_qos(prefetch_count=self._qos)
        declared = await self._declare_queues(self.read_channel)
        queues = [queue for queue, _ in declared if queue.name in self._consume]
        log.info("consuming %s", ", ".join(sorted(q.name for q in queues)))
        async for message in merge_async_iterables(*(self._consume_queue(q) for q in queues)):
            yield message

    async def _consume_queue(self, queue: AbstractQueue) -> AsyncGenerator[AckableMessage, None]:
        try:
            async with queue.iterator() as iterator:
                async for message in iterator:
                    body = await self._admit(message, queue.name)
                    if body is not None:
                        yield AckableMessage(data=body, ack=functools.partial(self._ack, message))
        except (RuntimeError, asyncio.CancelledError):
            log.info("stopped consuming %s", queue.name)

    async def _ack(self, message: AbstractIncomingMessage) -> None:
        """Acknowledge a message whose job the runner is done with. If its channel has
        closed meanwhile (RabbitMQ restarted, the connection dropped), RabbitMQ has put
        the message back already; the redelivery finds the job recorded, or, when the
        runner had deferred the message (sent it round again), is a duplicate of the
        message it sent, which the runner sees through (the job is claimed once). Nothing
        is lost, so this is no error. Any other failure (a second ack of one message, an
        ack refused on an open channel) is a bug or a broker problem: logged at ERROR.
        Nothing is raised either way: Taskiq would let the exception end its callback
        task unretrieved (asyncio's "Task exception was never retrieved")."""
        try:
            await message.ack()
        except Exception as exc:  # every failure is logged below; a raise would go unseen
            if not _channel_closed(message, exc):
                log.error(
                    "message %s could not be acknowledged on its open channel: %s",
                    message.message_id,
                    _why(exc),
                    exc_info=exc,
                )
                return
            self._watch.ack_lost()
            log.debug(
                "message %s not acknowledged: its channel is gone (%s)",
                message.message_id,
                _why(exc),
            )

    async def _admit(self, message: AbstractIncomingMessage, queue: str) -> bytes | None:
        """The body to run if the message is a job message (a job of a type this worker
        has no task for goes to the unknown-type task, which fails the job); otherwise
        dead-letter it with the reason, acknowledge it and return None."""
        try:
            parsed = decode(message.body)
        except MalformedMessageError as exc:
            reason = f"malformed message: {exc}"
        else:
            if self.find_task(parsed.job_type) is not None:
                return message.body
            if self.find_task(UNKNOWN_TYPE_TASK) is not None:
                return reroute_unknown_type(message.body, parsed.job_type)
            reason = f"unknown task {parsed.job_type!r}"
        log.warning("dead-lettering message %s from %s: %s", message.message_id, queue, reason)
        envelope = dead_letter(
            body=message.body,
            reason=reason,
            source_queue=self.topology.logical(queue) or queue,
            dead_letter_queue=self.topology.dead_letter_logical,
            at=self._clock.now(),
            headers={k: str(v) for k, v in (message.headers or {}).items() if k != "x-death"},
            message_id=message.message_id,
        )
        try:
            await self.publish(envelope)
        except BrokerUnavailableError:
            # Not safely parked yet: put it back so that it is tried again later.
            await asyncio.sleep(1)
            with contextlib.suppress(Exception):
                await message.nack(requeue=True)
            return None
        with contextlib.suppress(Exception):  # a closed channel redelivers it anyway
            await message.ack()
        return None


class EmbeddedJobBroker(InMemoryBroker):
    """Taskiq's in-memory broker with delays and an in-memory dead-letter queue."""

    def __init__(
        self,
        settings: RabbitSettings,
        *,
        shutdown_grace_s: float = 30.0,
        clock: Clock | None = None,
    ) -> None:
        super().__init__(max_async_tasks=100)
        self.topology = Topology.from_settings(settings)
        self._shutdown_grace_s = shutdown_grace_s
        self._settings = settings
        self._clock = clock or SystemClock()
        self.dead_letters: deque[Envelope] = deque(maxlen=1000)
        self._timers: set[asyncio.TimerHandle] = set()

    @property
    def is_connected(self) -> bool:
        return True

    @property
    def safe_to_scan(self) -> bool:
        return True  # an in-memory list: looking drops nothing

    async def publish(self, envelope: Envelope) -> None:
        if envelope.queue == self._settings.dead_letter_queue:
            self.dead_letters.append(envelope)
            return
        if envelope.queue not in self._settings.queues:
            raise ValueError(f"unknown queue {envelope.queue!r}")
        delay_s = _delay_ms(envelope, self._clock) / 1000
        if delay_s <= 0:
            self._deliver(envelope)
            return
        loop = asyncio.get_running_loop()
        handle: asyncio.TimerHandle | None = None

        def fire() -> None:
            if handle is not None:
                self._timers.discard(handle)
            self._deliver(envelope)

        handle = loop.call_later(delay_s, fire)
        self._timers.add(handle)

    def _deliver(self, envelope: Envelope) -> None:
        try:
            parsed = decode(envelope.body)
        except MalformedMessageError as exc:
            self._park(envelope, f"malformed message: {exc}")
            return
        body = envelope.body
        if self.find_task(parsed.job_type) is None:
            if self.find_task(UNKNOWN_TYPE_TASK) is None:
                self._park(envelope, f"unknown task {parsed.job_type!r}")
                return
            body = reroute_unknown_type(body, parsed.job_type)
        task = asyncio.create_task(self.receiver.callback(message=body))
        self._running_tasks.add(task)
        task.add_done_callback(self._running_tasks.discard)

    def _park(self, envelope: Envelope, reason: str) -> None:
        log.warning("dead-lettering message %s: %s", envelope.id, reason)
        self.dead_letters.append(
            dead_letter(
                body=envelope.body,
                reason=reason,
                source_queue=envelope.queue,
                dead_letter_queue=self._settings.dead_letter_queue,
                at=self._clock.now(),
                message_id=envelope.message_id,
            )
        )

    async def queue_depths(self) -> list[QueueDepth]:
        """The embedded broker keeps no backlog (jobs start as they arrive, or wait on a
        timer): ready counts the delayed ones; the DLQ is its in-memory list."""
        delayed = len(self._timers)
        return [
            *(
                QueueDepth(queue, delayed if queue == self._settings.default_queue else 0, 1)
                for queue in self._settings.queues
            ),
            QueueDepth(self._settings.dead_letter_queue, len(self.dead_letters), 0),
        ]

    async def peek_dead_letters(self, limit: int) -> list[DeadLetter]:
        return [_describe(envelope) for envelope in list(self.dead_letters)[:limit]]

    async def settle_dead_letters(
        self, decide: Callable[[DeadLetter], Awaitable[bool]], limit: int
    ) -> None:
        looked = list(self.dead_letters)[:limit]
        gone = {id(envelope) for envelope in looked if await decide(_describe(envelope))}
        kept = [envelope for envelope in self.dead_letters if id(envelope) not in gone]
        self.dead_letters.clear()
        self.dead_letters.extend(kept)

    async def purge_dead_letters(self) -> int:
        purged = len(self.dead_letters)
        self.dead_letters.clear()
        return purged

    async def shutdown(self) -> None:
        """Let running jobs finish within the grace period, then stop the rest: they stay
        claimed in the database and resume after their lease when the process restarts."""
        for handle in self._timers:
            handle.cancel()
        self._timers.clear()
        running = set(self._running_tasks)
        if running:
            _done, unfinished = await asyncio.wait(running, timeout=self._shutdown_grace_s)
            for task in unfinished:
                task.cancel()
            if unfinished:
                log.warning("stopped %d unfinished jobs at shutdown", len(unfinished))
                await asyncio.wait(unfinished, timeout=5)
        await super().shutdown()


def _describe(envelope: Envelope) -> DeadLetter:
    return describe_dead_letter(envelope.message_id, envelope.body, envelope.headers)


def _why(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
