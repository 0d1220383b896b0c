"""The two Taskiq brokers jobrail runs on, each composed of the messaging adapters.

Both publish ``Envelope``s (with delays and dead letters), keep a dead-letter queue for
operators, and refuse to run what is not a job message (`jobrail.transport.screening`):

- ``AmqpJobBroker`` (stack mode) is taskiq-aio-pika's broker with jobrail's topology
  (``topology``), publisher (``publishing``), dead-letter queue (``dead_letters``) and
  consumer (``consuming``). A RabbitMQ restart is logged once (``reconnects``). Where it
  reaches past taskiq-aio-pika's public API is ``internals``.
- ``EmbeddedJobBroker`` (embedded mode) is Taskiq's in-memory broker: tasks run in the
  same process; delays are timers; dead letters stay in memory.
"""

import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol

from jobrail.jobs.messages import DeadLetter
from jobrail.jobs.operator_reads import QueueDepth
from jobrail.transport.codec import Envelope
from jobrail.transport.topology import (
    Topology,
)

log = logging.getLogger("jobrail.broker")


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

    async def ready(self, queue: str) -> int:
        """Messages of the work queue `queue` (its logical name) that wait for a worker
        to take them (not those taken and not yet acknowledged); raises
        BrokerUnavailableError when the broker cannot be asked."""
        ...

    async def queue_depths(self) -> list[QueueDepth]:
        """Messages ready and consumers of every work queue and of the dead-letter
        queue; raises BrokerUnavailableError when the broker cannot be asked."""
        ...

    async def peek_dead_letters(self, limit: int) -> list[DeadLetter]: ...

    async def settle_dead_letters(
        self, decide: Callable[[DeadLetter], Awaitable[bool]], limit: int
    ) -> None: ...

    async def purge_dead_letters(self) -> int: ...
