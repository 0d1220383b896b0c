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
  batch (whatever the prefetcher has queued, and what reaches it within
  ``JOBRAIL_WORKER__BATCH_WINDOW_MS``), and starts the batch's jobs in one event-loop
  turn. Each stage the jobs go through collects the calls made in one turn into one
  (``jobrail.batching.Coalescer``): so the batch is admitted with one Redis call and
  claimed with one statement, and the outcomes that are ready together are recorded
  with one statement. Each job keeps its own semantics: a denial defers only that job,
  a failure records only that job, and a delivery is acknowledged only once its job's
  outcome is recorded (or its message is safely back on the bus), so a crash loses
  nothing.
- **Decoded once.** A job message is decoded by the codec once, and runs straight
  through the job's route (``JobRoutes.run``): the runner, the handler bound to its
  dependencies (a request scope only for a handler that asks for dependencies).

A message that is not a job message of a type this worker runs (the unknown-type task,
anything a Taskiq user sends on its own) takes Taskiq's path unchanged.
"""

import asyncio
import logging
from typing import Any

from taskiq import AckableMessage
from taskiq.receiver import Receiver
from taskiq.utils import maybe_awaitable

from jobrail.jobs.messages import JobMessage
from jobrail.messaging.screening import ScreenedMessage
from jobrail.messaging.tasks import ROUTES_STATE, JobRoutes

log = logging.getLogger("jobrail.receiver")

# At most this many deliveries start together (the prefetch bounds it first).
MAX_BATCH = 256


class JobReceiver(Receiver):
    """Taskiq's receiver with the batch path for job messages (see the module)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        routes = self.broker.state.get(ROUTES_STATE)
        self._routes: JobRoutes | None = routes if isinstance(routes, JobRoutes) else None
        self._window_s = self._routes.batch_window_s if self._routes is not None else 0.0

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
        """Move deliveries from Taskiq's prefetch queue to its runner a batch at a time:
        the first one, everything queued behind it, and what arrives within the window.
        Taskiq's runner starts everything it finds queued without yielding, so a batch's
        jobs start in one event-loop turn."""
        loop = asyncio.get_running_loop()
        while True:
            batch = [await source.get()]
            deadline = loop.time() + self._window_s
            while len(batch) < MAX_BATCH:
                try:
                    batch.append(source.get_nowait())
                    continue
                except asyncio.QueueEmpty:
                    pass
                left = deadline - loop.time()
                if left <= 0:
                    break
                # Let the prefetcher hand over what the broker has received meanwhile.
                await asyncio.sleep(0 if left < 0.0005 else min(left, 0.0005))
            for item in batch:
                sink.put_nowait(item)

    async def callback(self, message: bytes | AckableMessage, raise_err: bool = False) -> None:
        routes = self._routes
        delivery: JobMessage | None = None
        if isinstance(message, ScreenedMessage):  # decoded by the consumer already
            delivery = routes.routed(message.job) if routes is not None else None
        elif routes is not None:
            delivery = routes.delivery(
                message.data if isinstance(message, AckableMessage) else message
            )
        if routes is None or delivery is None:
            await super().callback(message, raise_err)
            return
        await routes.run(delivery)
        # Only now: the outcome is recorded, or the message is back on the bus.
        if isinstance(message, AckableMessage):
            await maybe_awaitable(message.ack())
