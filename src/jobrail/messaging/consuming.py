"""The AMQP consumer: deliveries in, Taskiq's ``AckableMessage``s out.

Each delivery gets `jobrail.messaging.screening.screen`'s verdict: what runs is yielded
with an ack that a closed channel does not turn into an error; what is refused is
published to the DLQ with its reason and acknowledged (or, when the DLQ cannot take it,
put back to be tried again), since Taskiq would acknowledge and forget it.
"""

import asyncio
import contextlib
import functools
import logging
from collections.abc import AsyncGenerator, Awaitable, Callable

from aio_pika.abc import AbstractIncomingMessage, AbstractQueue
from taskiq import AckableMessage

from jobrail.jobs.ports import BrokerUnavailableError
from jobrail.kernel.clock import Clock
from jobrail.messaging.amqp_errors import channel_closed, why
from jobrail.messaging.codec import Envelope, dead_letter
from jobrail.messaging.reconnects import ConnectionWatch
from jobrail.messaging.screening import Run, ScreenedMessage, screen
from jobrail.messaging.topology import Topology

log = logging.getLogger("jobrail.broker")

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
