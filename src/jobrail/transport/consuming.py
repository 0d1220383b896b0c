"""The AMQP consumer: deliveries in, Taskiq's ``AckableMessage``s out.

Each delivery gets `jobrail.transport.screening.screen`'s verdict: what runs is yielded
with an ack that a closed channel does not turn into an error; what is refused is
published to the DLQ with its reason and acknowledged (or, when the DLQ cannot take it,
put back to be tried again), since Taskiq would acknowledge and forget it.

`Deliveries` merges the consumers of a worker's queues into one stream, and hands over
at once everything that has arrived (`take_ready`).
"""

import asyncio
import contextlib
import functools
import logging
from collections import deque
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Iterable
from typing import Generic, TypeVar

from aio_pika.abc import AbstractIncomingMessage, AbstractQueue
from taskiq import AckableMessage

from jobrail.kernel.clock import Clock
from jobrail.kernel.errors import BrokerUnavailableError
from jobrail.transport.amqp_errors import channel_closed, why
from jobrail.transport.codec import Envelope, dead_letter
from jobrail.transport.reconnects import ConnectionWatch
from jobrail.transport.screening import Run, ScreenedMessage, screen
from jobrail.transport.topology import Topology

log = logging.getLogger("jobrail.broker")

T = TypeVar("T")

# How long a refused message the DLQ could not take waits before it goes back.
REQUEUE_AFTER_S = 1.0


class AmqpConsumer:
    def __init__(
        self,
        *,
        topology: Topology,
        has_task: Callable[[str], bool],
        publish: Callable[[Envelope], Awaitable[None]],
        clock: Clock,
        watch: ConnectionWatch,
    ) -> None:
        self._topology = topology
        self._has_task = has_task
        self._publish = publish
        self._clock = clock
        self._watch = watch

    async def consume(self, queue: AbstractQueue) -> AsyncGenerator[AckableMessage, None]:
        """The messages of `queue` to run, until its channel closes for good."""
        try:
            async with queue.iterator() as iterator:
                async for message in iterator:
                    verdict = screen(message.body, self._has_task)
                    if isinstance(verdict, Run):
                        yield ScreenedMessage(
                            data=verdict.body,
                            ack=functools.partial(self.ack, message),
                            job=verdict.message,
                        )
                    else:
                        await self._refuse(message, queue.name, verdict.reason)
        except (RuntimeError, asyncio.CancelledError):
            log.info("stopped consuming %s", queue.name)

    async def ack(self, message: AbstractIncomingMessage) -> None:
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
            if not channel_closed(message, exc):
                log.error(
                    "message %s could not be acknowledged on its open channel: %s",
                    message.message_id,
                    why(exc),
                    exc_info=exc,
                )
                return
            self._watch.ack_lost()
            log.debug(
                "message %s not acknowledged: its channel is gone (%s)",
                message.message_id,
                why(exc),
            )

    async def _refuse(self, message: AbstractIncomingMessage, queue: str, reason: str) -> None:
        log.warning("dead-lettering message %s from %s: %s", message.message_id, queue, reason)
        envelope = dead_letter(
            body=message.body,
            reason=reason,
            source_queue=self._topology.logical(queue) or queue,
            dead_letter_queue=self._topology.dead_letter_logical,
            at=self._clock.now(),
            headers={k: str(v) for k, v in (message.headers or {}).items() if k != "x-death"},
            message_id=message.message_id,
        )
        try:
            await self._publish(envelope)
        except BrokerUnavailableError:
            # Not safely parked yet: put it back so that it is tried again later.
            await asyncio.sleep(REQUEUE_AFTER_S)
            with contextlib.suppress(Exception):
                await message.nack(requeue=True)
            return
        with contextlib.suppress(Exception):  # a closed channel redelivers it anyway
            await message.ack()


class Deliveries(Generic[T]):
    """The items of several async streams (a worker's queue consumers), merged in the
    order they arrive, as one async iterator.

    Taskiq's receiver takes one delivery at a time, and each costs it two event-loop
    turns (a task and a wait). A worker's turns are long while it runs a batch of jobs,
    so deliveries that RabbitMQ has sent meanwhile would reach the worker one turn
    apart, and start a few at a time. `take_ready` hands over everything that has
    arrived, for the worker's receiver to start together (`jobrail.transport.receiver`).
    Written here rather than with taskiq-aio-pika's ``merge_async_iterables``, whose
    queue offers no such look at what is waiting.

    Like that merge, it ends when every stream has ended, and what ends a stream with an
    exception is raised once the items that arrived before it are taken.
    """

    def __init__(self, streams: Iterable[AsyncIterator[T]]) -> None:
        self._ready: deque[T] = deque()
        self._error: BaseException | None = None
        self._changed = asyncio.Event()
        self._pumps = [asyncio.ensure_future(self._pump(stream)) for stream in streams]
        self._open = len(self._pumps)

    async def _pump(self, stream: AsyncIterator[T]) -> None:
        try:
            async for item in stream:
                self._ready.append(item)
                self._changed.set()
        except asyncio.CancelledError:
            raise  # closed (see close)
        except BaseException as exc:  # noqa: BLE001 - raised to the reader (see __anext__)
            if self._error is None:
                self._error = exc
        finally:
            self._open -= 1
            self._changed.set()

    def __aiter__(self) -> "Deliveries[T]":
        return self

    async def __anext__(self) -> T:
        while not self._ready:
            if self._error is not None:
                raise self._error
            if self._open == 0:
                raise StopAsyncIteration
            self._changed.clear()
            await self._changed.wait()
        return self._ready.popleft()

    def take_ready(self, limit: int) -> list[T]:
        """Up to `limit` items that have arrived and are not taken yet, oldest first."""
        ready = self._ready
        return [ready.popleft() for _ in range(min(limit, len(ready)))]

    async def close(self) -> None:
        """Stop every stream. What has arrived and was not taken is dropped: an AMQP
        delivery that is never acknowledged goes back to its queue when its channel
        closes."""
        for pump in self._pumps:
            pump.cancel()
        await asyncio.gather(*self._pumps, return_exceptions=True)
