"""Queue topology: work queues, the dead-letter queue and the delay tiers.

Delays use a fixed set of queues, one per delay tier, each with a queue-wide TTL
and dead-lettering back to the work exchange. A message for queue Q delayed by d
goes to the largest tier not longer than d (or the shortest tier), keeping Q as
its routing key; when it expires RabbitMQ routes it back to Q. If it arrives
early (d was between tiers) the worker sends it round again for the rest. With
one queue per TTL, a short delay never waits behind a long one.

The dead-letter queue is where messages stop, so nothing may drop them from it. Looking
at it (``GET /admin/dlq``, a redrive, a purge) takes messages with ``basic.get`` and
gives back the ones it keeps by closing its channel, and a quorum queue counts every
such return as a delivery (RabbitMQ 3.x and 4.x alike; 4.3 spares ``basic.nack`` only).
RabbitMQ 4 gives every quorum queue that sets no limit a delivery limit of 20, and the
DLQ has no dead-letter exchange behind it: the 21st look would drop a dead letter
silently. So the DLQ sets its limit explicitly, to a value that means "never" on every
version (`DEAD_LETTER_DELIVERY_LIMIT`).
"""

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import aio_pika
import aiormq
from aio_pika.abc import AbstractChannel, AbstractConnection
from taskiq_aio_pika import Exchange, Queue, QueueType

from jobrail.jobs.operator_reads import QueueDepth
from jobrail.kernel.errors import BrokerUnavailableError
from jobrail.settings import RabbitSettings
from jobrail.transport.amqp_errors import CHANNEL_GONE, why

log = logging.getLogger("jobrail.broker")

# Headers exchanges ignore headers that start with "x-" when matching bindings.
DELAY_HEADER = "jobrail-delay-tier"

# A message that keeps killing its consumer is dead-lettered by RabbitMQ after this
# many deliveries (quorum queues count them).
DELIVERY_LIMIT = 20

# The dead-letter queue's delivery limit: 2^31 - 1 returns, i.e. never.
# Not -1: RabbitMQ 4 reads -1 as "no limit", but 3.x accepts it and drops a message at
# its first return (on 3.10.8 a dead letter is gone after one look). Not absent: 4.x
# then applies its default of 20. The largest signed 32-bit value is read the same
# way by both, so the queue is declared with the same arguments before and after an
# upgrade from 3.x to 4.x. (At one look a second it lasts 68 years.)
DEAD_LETTER_DELIVERY_LIMIT = 2**31 - 1


def dead_letter_queue_arguments(*, quorum: bool) -> dict[str, Any]:
    """The arguments the DLQ is declared with (classic queues count no deliveries)."""
    if not quorum:
        return {}
    return {"x-queue-type": "quorum", "x-delivery-limit": DEAD_LETTER_DELIVERY_LIMIT}


def dead_letter_policy_hint(queue: str) -> str:
    """How an operator sets the DLQ's limit on a queue declared before it had one."""
    pattern = "^" + queue.replace(".", "\\.") + "$"
    return (
        f"rabbitmqctl set_policy jobrail-dlq '{pattern}' "
        f"'{{\"delivery-limit\": {DEAD_LETTER_DELIVERY_LIMIT}}}' "
        "--apply-to quorum_queues --priority 10"
    )


async def declare_dead_letter_queue(
    connection: AbstractConnection, channel: AbstractChannel, name: str, *, quorum: bool
) -> bool:
    """Declare the DLQ with `dead_letter_queue_arguments`, or keep the one that exists;
    return whether it has them, i.e. whether looking through it can never drop a letter
    (False: an older queue kept as it is, whose returns may count up to RabbitMQ 4's
    default limit; a redrive then does not go through it to tidy up).

    A DLQ declared by an older jobrail has no delivery limit among its arguments, and
    RabbitMQ refuses to declare a queue again with other arguments (PRECONDITION_FAILED),
    and arguments never change on an existing queue. So the full declaration is tried on
    a channel of its own (the refusal closes it); if the queue exists with other
    arguments it is used as it is, with a warning naming the policy that gives it the
    limit (a policy's ``delivery-limit`` applies to existing queues)."""
    arguments = dead_letter_queue_arguments(quorum=quorum)
    try:
        async with connection.channel() as probe:
            await probe.declare_queue(name, durable=True, arguments=arguments)
    except aiormq.exceptions.ChannelPreconditionFailed as exc:
        log.warning(
            "dead-letter queue %s exists with other arguments (%s), most likely declared "
            "by an older jobrail without a delivery limit; using it as it is. On RabbitMQ "
            "4 such a quorum queue drops a message after 20 returns, and every look at "
            "the DLQ returns its messages, unless a policy sets its limit: %s (a policy "
            "does not change the queue's arguments, so this warning stays)",
            name,
            exc,
            dead_letter_policy_hint(name),
        )
        declared = False
    else:
        declared = True
    await channel.declare_queue(name, passive=True)
    return declared


def pick_tier(delay_ms: float, tiers_ms: Sequence[int]) -> int | None:
    """The delay tier for a message due in `delay_ms`; None when it is due now."""
    if delay_ms <= 0:
        return None
    fitting = [tier for tier in tiers_ms if tier <= delay_ms]
    return max(fitting) if fitting else min(tiers_ms)


def tier_label(tier_ms: int) -> str:
    return f"{tier_ms}ms"


@dataclass(frozen=True, slots=True)
class Topology:
    """Physical names (with the configured prefix) of everything the platform declares."""

    exchange: str
    delay_exchange: str
    queues: dict[str, str]
    dead_letter_logical: str
    dead_letter_queue: str
    delay_queues: dict[int, str]

    @classmethod
    def from_settings(cls, settings: RabbitSettings) -> "Topology":
        return cls(
            exchange=settings.name(settings.exchange),
            delay_exchange=settings.name(f"{settings.exchange}.delay"),
            queues={queue: settings.name(queue) for queue in settings.queues},
            dead_letter_logical=settings.dead_letter_queue,
            dead_letter_queue=settings.name(settings.dead_letter_queue),
            delay_queues={
                tier: settings.name(f"jobs.delay.{tier_label(tier)}")
                for tier in settings.delay_tiers_ms
            },
        )

    def physical(self, queue: str) -> str:
        """Physical name of a logical queue (a work queue or the dead-letter queue)."""
        if queue == self.dead_letter_logical:
            return self.dead_letter_queue
        try:
            return self.queues[queue]
        except KeyError:
            raise ValueError(f"unknown queue {queue!r}") from None

    def logical(self, physical: str) -> str | None:
        for logical, name in self.queues.items():
            if name == physical:
                return logical
        return None

    def work_exchange(self) -> Exchange:
        """The work exchange, as taskiq-aio-pika declares it."""
        return Exchange(name=self.exchange, type=aio_pika.ExchangeType.DIRECT)

    def work_queues(self, *, quorum: bool) -> list[Queue]:
        """The work queues, as taskiq-aio-pika declares them (bound to the work exchange
        by their name, dead-lettering to the DLQ)."""
        queue_type = QueueType.QUORUM if quorum else QueueType.CLASSIC
        arguments: dict[str, Any] = {"x-delivery-limit": DELIVERY_LIMIT} if quorum else {}
        return [
            Queue(name=name, type=queue_type, arguments=arguments) for name in self.queues.values()
        ]

    def dead_letter_queue_config(self) -> Queue:
        """The DLQ for taskiq-aio-pika, which only checks that it exists: jobrail declares
        it itself, with its own delivery limit (`declare_dead_letter_queue`)."""
        return Queue(name=self.dead_letter_queue, declare=False)


async def declare_delays(channel: AbstractChannel, topology: Topology, *, quorum: bool) -> None:
    """Bind the DLQ to the work exchange (dead letters are published there) and declare the
    delay exchange with one queue per tier, each dead-lettering back to the work exchange."""
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
        if quorum:
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


async def queue_depths(
    connection: AbstractConnection | None, topology: Topology, *, timeout_s: float
) -> list[QueueDepth]:
    """Messages ready and consumers of every work queue and of the DLQ (logical names);
    BrokerUnavailableError when RabbitMQ cannot be asked."""
    if connection is None or connection.is_closed:
        raise BrokerUnavailableError("not connected to RabbitMQ")
    names = {**topology.queues, topology.dead_letter_logical: topology.dead_letter_queue}
    depths = []
    try:
        # A channel of its own: a passive declare of a missing queue closes it.
        async with asyncio.timeout(timeout_s), connection.channel() as channel:
            for logical, physical in names.items():
                queue = await channel.declare_queue(physical, passive=True)
                result = queue.declaration_result
                depths.append(
                    QueueDepth(logical, result.message_count or 0, result.consumer_count or 0)
                )
    except (*CHANNEL_GONE, TimeoutError) as exc:
        raise BrokerUnavailableError(f"queue depths: {why(exc)}") from exc
    return depths
