"""Publishing envelopes: straight to their queue when due, through a delay tier when not.

`AmqpPublisher` publishes on a channel of its own with publisher confirms and
``mandatory`` (an unroutable message raises instead of vanishing), to the work exchange
or, for a message due later, to the delay exchange with its tier's header (see
``jobrail.transport.topology``). `MemoryPublisher` is the embedded broker's: a due message
is delivered at once, a later one on a timer, a dead letter kept in memory.
"""

import asyncio
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import aio_pika
import aiormq
from aio_pika.abc import AbstractChannel, AbstractConnection, AbstractExchange
from aiormq import spec

from jobrail.kernel.clock import Clock
from jobrail.kernel.errors import BrokerUnavailableError
from jobrail.transport.amqp_errors import CHANNEL_GONE, why
from jobrail.transport.codec import Envelope
from jobrail.transport.dead_letters import MemoryDeadLetters
from jobrail.transport.internals import Outbound, publish_batch
from jobrail.transport.topology import DELAY_HEADER, Topology, pick_tier, tier_label

PERSISTENT = aio_pika.DeliveryMode.PERSISTENT.value


def delay_ms(envelope: Envelope, now: datetime) -> float:
    """How long until `envelope` is due (0 or less: it is due)."""
    if envelope.not_before is None:
        return 0.0
    return (envelope.not_before - now).total_seconds() * 1000


@dataclass(frozen=True, slots=True)
class Route:
    """Where an envelope goes: its queue's routing key on the work exchange, or on the
    delay exchange when `tier_ms` is set (its header then names the tier)."""

    routing_key: str
    headers: dict[str, str]
    tier_ms: int | None


def route(envelope: Envelope, topology: Topology, tiers_ms: Sequence[int], now: datetime) -> Route:
    """The route of `envelope`; ValueError for a queue the topology does not have."""
    headers = dict(envelope.headers)
    tier = pick_tier(delay_ms(envelope, now), tiers_ms)
    if tier is not None:
        headers[DELAY_HEADER] = tier_label(tier)
    return Route(topology.physical(envelope.queue), headers, tier)


async def publish_confirmed(
    channel: aiormq.abc.AbstractChannel,
    body: bytes,
    exchange: str,
    routing_key: str,
    properties: spec.Basic.Properties,
    timeout_s: float | None = None,
) -> None:
    """Publish ``mandatory`` and wait for RabbitMQ's confirm (the channel confirms).

    What aio-pika's ``Exchange.publish`` does, less its ``Message`` object, and with
    aiormq's ``wait=False``: by default aiormq holds the channel's lock until a
    message's frames are on the socket, so concurrent publishes (the API's, the
    worker's) went out one write at a time, each waiting for the last; this costs a
    third less CPU per publish (`python -m bench.publish_cost`). The confirm is awaited
    all the same, and an unroutable message still raises. ``wait`` is not on aiormq's
    abstract channel, so the call is typed here once; tests/unit/test_broker_adapters.py
    fails if an upgrade drops it, tests/integration/test_amqp_broker.py if the confirm is
    no longer awaited. `timeout_s` is aiormq's own deadline, over the channel's lock and
    the confirm (TimeoutError past it): aiormq keeps one either way, so a second one
    around the call only cost a timer per publish.
    """
    publish: Any = channel.basic_publish
    await publish(
        body,
        exchange=exchange,
        routing_key=routing_key,
        properties=properties,
        mandatory=True,
        timeout=timeout_s,
        wait=False,
    )


class AmqpPublisher:
    def __init__(
        self,
        topology: Topology,
        *,
        delay_tiers_ms: Sequence[int],
        publish_timeout_s: float,
        clock: Clock,
    ) -> None:
        self._topology = topology
        self._tiers_ms = delay_tiers_ms
        self._timeout_s = publish_timeout_s
        self._clock = clock
        self._channel: AbstractChannel | None = None
        self._exchanges: tuple[AbstractExchange, AbstractExchange] | None = None
        self._underlay_channel: aiormq.abc.AbstractChannel | None = None

    async def open(self, connection: AbstractConnection) -> None:
        """Open the confirming channel on `connection` (the topology is declared)."""
        channel = await connection.channel(publisher_confirms=True, on_return_raises=True)
        work = await channel.get_exchange(self._topology.exchange, ensure=False)
        delay = await channel.get_exchange(self._topology.delay_exchange, ensure=False)
        self._channel, self._exchanges = channel, (work, delay)
        self._underlay_channel = None

    async def close(self) -> None:
        if self._channel is not None:
            await self._channel.close()

    @property
    def is_open(self) -> bool:
        return self._channel is not None and not self._channel.is_closed

    async def publish(self, envelope: Envelope) -> None:
        """Publish with a publisher confirm; raise BrokerUnavailableError if not confirmed."""
        outbound = self._outbound(envelope, self._clock.now())
        try:
            await publish_confirmed(
                await self._confirming_channel(),
                outbound.body,
                outbound.exchange,
                outbound.routing_key,
                outbound.properties,
                self._timeout_s,
            )
        except (*CHANNEL_GONE, TimeoutError) as exc:
            raise _failed(outbound, exc) from exc

    async def publish_many(
        self, envelopes: Sequence[Envelope], timeout_s: float | None = None
    ) -> list[BaseException | None]:
        """Publish `envelopes` in order, in one write, and wait for each one's confirm
        (``jobrail.transport.internals``), `timeout_s` at most (and no longer than a
        publish may take). Each one's outcome: None when confirmed, else the
        BrokerUnavailableError its own `publish` would have raised."""
        outcomes: list[BaseException | None] = [None] * len(envelopes)
        now = self._clock.now()
        batch: list[Outbound] = []
        placed: list[int] = []  # the envelope each message of the batch is
        for at, envelope in enumerate(envelopes):
            try:
                batch.append(self._outbound(envelope, now))
            except BrokerUnavailableError as exc:
                outcomes[at] = exc
            else:
                placed.append(at)
        if not batch:
            return outcomes
        deadline_s = self._timeout_s if timeout_s is None else min(timeout_s, self._timeout_s)
        confirmed: list[BaseException | None]
        try:
            confirmed = await publish_batch(await self._confirming_channel(), batch, deadline_s)
        except (*CHANNEL_GONE, TimeoutError) as exc:
            confirmed = [exc] * len(batch)
        for at, outbound, outcome in zip(placed, batch, confirmed, strict=True):
            if outcome is not None:
                outcomes[at] = _failed(outbound, outcome)
        return outcomes

    def _outbound(self, envelope: Envelope, now: datetime) -> Outbound:
        """`envelope` as the message to publish: its exchange, routing key and properties
        (BrokerUnavailableError when not connected, or for a queue the topology lacks)."""
        if self._exchanges is None or not self.is_open:
            raise BrokerUnavailableError("not connected to RabbitMQ")
        try:
            to = route(envelope, self._topology, self._tiers_ms, now)
        except ValueError as exc:
            raise BrokerUnavailableError(str(exc)) from exc
        work, delay = self._exchanges
        properties = spec.Basic.Properties(
            delivery_mode=PERSISTENT, headers=dict(to.headers), message_id=envelope.message_id
        )
        exchange = work if to.tier_ms is None else delay
        return Outbound(envelope.body, exchange.name, to.routing_key, properties)

    async def _confirming_channel(self) -> aiormq.abc.AbstractChannel:
        underlay = self._underlay_channel
        if underlay is None or underlay.is_closed:
            opened = self._channel
            if opened is None:
                raise BrokerUnavailableError("not connected to RabbitMQ")
            async with asyncio.timeout(self._timeout_s):
                underlay = await self._underlay(opened)
        return underlay

    async def _underlay(self, opened: AbstractChannel) -> aiormq.abc.AbstractChannel:
        """The aiormq channel under `opened`. Kept between publishes: asking a robust
        channel for it waits until its connection is ready, a lock and a future per
        publish. A reconnect gives the robust channel a new one and closes the old."""
        underlay = self._underlay_channel
        if underlay is None or underlay.is_closed:
            underlay = self._underlay_channel = await opened.get_underlay_channel()
        return underlay


def _failed(outbound: Outbound, exc: BaseException) -> BrokerUnavailableError:
    return BrokerUnavailableError(f"publish to {outbound.routing_key} failed: {why(exc)}")


class MemoryPublisher:
    """Delivers each envelope to `deliver` when it is due (at once, or on a timer) and
    keeps dead letters in `dead_letters`."""

    def __init__(
        self,
        *,
        queues: Collection[str],
        dead_letters: MemoryDeadLetters,
        deliver: Callable[[Envelope], None],
        clock: Clock,
    ) -> None:
        self._queues = queues
        self._dead_letters = dead_letters
        self._deliver = deliver
        self._clock = clock
        self._timers: set[asyncio.TimerHandle] = set()

    @property
    def delayed(self) -> int:
        """How many envelopes wait on their timer."""
        return len(self._timers)

    async def publish_many(
        self, envelopes: Sequence[Envelope], timeout_s: float | None = None
    ) -> list[BaseException | None]:
        """Each envelope delivered or put on its timer at once: `timeout_s` is not needed."""
        outcomes: list[BaseException | None] = []
        for envelope in envelopes:
            try:
                await self.publish(envelope)
            except ValueError as exc:
                outcomes.append(exc)
            else:
                outcomes.append(None)
        return outcomes

    async def publish(self, envelope: Envelope) -> None:
        if envelope.queue == self._dead_letters.queue:
            self._dead_letters.append(envelope)
            return
        if envelope.queue not in self._queues:
            raise ValueError(f"unknown queue {envelope.queue!r}")
        delay_s = delay_ms(envelope, self._clock.now()) / 1000
        if delay_s <= 0:
            self._deliver(envelope)
            return
        handle: asyncio.TimerHandle | None = None

        def fire() -> None:
            if handle is not None:
                self._timers.discard(handle)
            self._deliver(envelope)

        handle = asyncio.get_running_loop().call_later(delay_s, fire)
        self._timers.add(handle)

    def cancel_delayed(self) -> None:
        """Drop every envelope still waiting on its timer."""
        for handle in self._timers:
            handle.cancel()
        self._timers.clear()
