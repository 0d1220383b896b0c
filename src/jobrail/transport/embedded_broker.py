"""The embedded mode's broker: Taskiq's in-memory broker, whose tasks run in the same
process; delays are timers, dead letters stay in memory."""

import asyncio
import logging
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, cast

from taskiq import InMemoryBroker

from jobrail.jobs.messages import DeadLetter
from jobrail.jobs.operator_reads import QueueDepth
from jobrail.kernel.clock import Clock, SystemClock
from jobrail.settings import RabbitSettings
from jobrail.transport.codec import Envelope, dead_letter
from jobrail.transport.dead_letters import MemoryDeadLetters
from jobrail.transport.publishing import MemoryPublisher
from jobrail.transport.screening import Refuse, ScreenedMessage, screen
from jobrail.transport.topology import (
    Topology,
)

log = logging.getLogger("jobrail.broker")


def _settled() -> None:
    """An in-memory delivery's acknowledgement: there is nothing to tell a broker."""


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

    async def ready(self, queue: str) -> int:
        """The deliveries of `queue` waiting for a slot."""
        return self._waiting[queue]

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
