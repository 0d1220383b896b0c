"""The receiver of jobrail's worker processes: Taskiq's, with a batch-oriented path for
job messages.

Taskiq's own receiver treats every delivery on its own: it parses it into a
``TaskiqMessage``, runs the middlewares' hooks, resolves the task's dependency graph
(dishka opens a request scope for every task) and stores a result nobody reads, and it
starts each delivery whenever the prefetcher hands it over, so the few calls every job
makes (admit, claim, record, release) reach Redis and Postgres one or two at a time.

`JobReceiver` keeps Taskiq's prefetching, its concurrency limit (``--max-async-tasks``),
its shutdown and every other message, and changes two things for job messages:

- **Batches by design.** It takes the deliveries at hand, up to the prefetch, as one
  batch: the one Taskiq's prefetcher hands over, everything the broker has received
  behind it (``take_ready``: Taskiq's prefetcher takes one delivery per two event-loop
  turns, and a busy worker's turns are long), and what reaches it within
  ``JOBRAIL_WORKER__BATCH_WINDOW_MS``. While at least ``JOBRAIL_WORKER__WAVE_SIZE`` jobs
  run, it holds a batch up to ``JOBRAIL_WORKER__WAVE_WAIT_MS`` for that many to join:
  the worker is busy anyway, and jobs that start together finish together, so the acks
  that free the broker's prefetch slots go out together and the next deliveries arrive
  in waves too (without waves, slots freed one at a time kept batches at 3-4 jobs). It
  starts the batch's jobs in one event-loop turn. Each stage the jobs go through
  collects the calls made in one turn into one (``jobrail.kernel.batching.Coalescer``): so the
  batch is admitted with one Redis call and claimed with one statement, and the outcomes
  that are ready together are recorded with one statement. Each job keeps its own
  semantics: a denial defers only that job, a failure records only that job, and a
  delivery is acknowledged only once its job's outcome is recorded (or its message is
  safely back on the bus), so a crash loses nothing. Holding happens before a job is
  admitted, so it moves no job between its rate-limit admission and its side effect.
- **Decoded once.** A job message is decoded by the codec once, and runs straight
  through the job's route (``JobRoutes.run``): the runner, the handler bound to its
  dependencies (a request scope only for a handler that asks for dependencies).

A message that is not a job message of a type this worker runs (the unknown-type task,
anything a Taskiq user sends on its own) takes Taskiq's path unchanged.

**A start-up that a signal ends.** Taskiq's worker process turns SIGTERM and SIGINT into
its `finish_event`, which only its prefetcher looks at: a broker start-up that waits for
RabbitMQ (a worker can do nothing without it) never saw it, and the process outlived the
signal for as long as RabbitMQ stayed away. `listen` races the start-up against the
event and, when the signal comes first, cancels the start-up and returns, so that
Taskiq's own broker shutdown runs and the process ends.

Taskiq's runner takes its queue's items as a type private to Taskiq: what this needs of it
is in ``jobrail.transport.internals``.
"""

import asyncio
import contextlib
import logging
from collections.abc import Coroutine
from typing import Any, Protocol, runtime_checkable

from taskiq import AckableMessage
from taskiq.receiver import Receiver
from taskiq.utils import maybe_awaitable

from jobrail.transport.internals import QUEUE_DONE, prefetched
from jobrail.transport.screening import ScreenedMessage
from jobrail.transport.tasks import ROUTES_STATE, JobRoutes

log = logging.getLogger("jobrail.receiver")

# At most this many deliveries start together (the prefetch bounds it first).
MAX_BATCH = 256


@runtime_checkable
class ReadyDeliveries(Protocol):
    """A broker that can hand over the deliveries it has received and not yielded yet
    (jobrail's AMQP broker)."""

    def take_ready(self, limit: int) -> list[AckableMessage]: ...


class JobReceiver(Receiver):
    """Taskiq's receiver with the batch path for job messages (see the module)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        routes = self.broker.state.get(ROUTES_STATE)
        self._routes: JobRoutes | None = routes if isinstance(routes, JobRoutes) else None
        self._window_s = self._routes.batch_window_s if self._routes is not None else 0.0
        self._wave_size = self._routes.wave_size if self._routes is not None else 1
        self._wave_wait_s = self._routes.wave_wait_s if self._routes is not None else 0.0
        self._ready = self.broker if isinstance(self.broker, ReadyDeliveries) else None
        self._running = 0  # deliveries whose callback has started and not ended
        # How many run at once (Taskiq's --max-async-tasks; None: no limit).
        capacity = kwargs.get("max_async_tasks")
        self._capacity: int | None = (
            capacity if isinstance(capacity, int) and capacity > 0 else None
        )

    async def listen(self, finish_event: asyncio.Event) -> None:
        """Start the broker, unless a signal stops the process first (see the module);
        then Taskiq's listening."""
        if self.run_startup:
            if not await _started_unless(self.broker.startup(), finish_event):
                log.info("stopped while starting")
                return
            self.run_startup = False
        await super().listen(finish_event)

    async def runner(self, queue: "asyncio.Queue[Any]") -> None:
        """Start the deliveries at hand together, then wait for the next ones."""
        if self._routes is None:
            await super().runner(queue)
            return
        batch_queue: asyncio.Queue[Any] = asyncio.Queue()
        batcher = asyncio.ensure_future(self._batches(queue, batch_queue))
        try:
            await super().runner(batch_queue)
        finally:
            batcher.cancel()

    async def _batches(self, source: "asyncio.Queue[Any]", sink: "asyncio.Queue[Any]") -> None:
        """Move deliveries from Taskiq's prefetch queue to its runner a batch at a time
        (see the module). Taskiq's runner starts everything it finds queued without
        yielding, so a batch's jobs start in one event-loop turn."""
        loop = asyncio.get_running_loop()
        while True:
            batch = [await source.get()]
            started = loop.time()
            while batch[-1] is not QUEUE_DONE and len(batch) < MAX_BATCH:
                batch += self._take_ready(MAX_BATCH - len(batch))
                if len(batch) >= MAX_BATCH:
                    break
                try:
                    batch.append(source.get_nowait())
                    continue
                except asyncio.QueueEmpty:
                    pass
                left = started + self._holding_s(len(batch)) - loop.time()
                if left <= 0:
                    break
                try:
                    async with asyncio.timeout(left):
                        batch.append(await source.get())
                except TimeoutError:
                    break
            for item in batch:
                sink.put_nowait(item)

    def _take_ready(self, limit: int) -> list[Any]:
        if self._ready is None:
            return []
        return [prefetched(message) for message in self._ready.take_ready(limit)]

    def _holding_s(self, batch: int) -> float:
        """How long a batch of `batch` deliveries waits for more: the batch window, or
        while a wave's worth of jobs runs and the wave is not full, the wave's wait. A
        wave is never larger than the slots left free (more could not start)."""
        wave = self._wave_size
        if self._capacity is not None:
            wave = min(wave, self._capacity - self._running)
        if batch < wave and self._running >= self._wave_size:
            return max(self._window_s, self._wave_wait_s)
        return self._window_s

    async def callback(self, message: bytes | AckableMessage, raise_err: bool = False) -> None:
        routes = self._routes
        if routes is None:
            await super().callback(message, raise_err)
            return
        self._running += 1
        try:
            await self._callback(routes, message, raise_err)
        finally:
            self._running -= 1

    async def _callback(
        self, routes: JobRoutes, message: bytes | AckableMessage, raise_err: bool
    ) -> None:
        if isinstance(message, ScreenedMessage):  # decoded by the consumer already
            routed = routes.routed(message.job)
        else:
            routed = routes.delivery(
                message.data if isinstance(message, AckableMessage) else message
            )
        if routed is None:
            await super().callback(message, raise_err)
            return
        await routes.run_routed(routed)
        # Only now: the outcome is recorded, or the message is back on the bus.
        if isinstance(message, AckableMessage):
            await maybe_awaitable(message.ack())


async def _started_unless(startup: Coroutine[Any, Any, None], stop: asyncio.Event) -> bool:
    """Run `startup` to its end (True), unless `stop` is set first: then it is cancelled,
    and False."""
    started = asyncio.ensure_future(startup)
    stopped = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait((started, stopped), return_when=asyncio.FIRST_COMPLETED)
    except BaseException:
        started.cancel()
        raise
    finally:
        stopped.cancel()
    if started.done():
        started.result()  # its error, if it failed
        return True
    started.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await started
    return False
