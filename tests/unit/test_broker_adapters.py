"""The brokers' parts on their own: the one admit decision, routing and delays, the
in-memory dead letters, and the AMQP consumer's transport part."""

import asyncio
import inspect
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import Any

import aiormq
import pytest
from taskiq import AckableMessage

from jobrail.jobs.messages import JobMessage
from jobrail.kernel.errors import BrokerUnavailableError
from jobrail.kernel.ids import JobId, new_id
from jobrail.settings import RabbitSettings
from jobrail.transport import consuming
from jobrail.transport.codec import (
    HEADER_REASON,
    HEADER_SOURCE_QUEUE,
    UNKNOWN_TYPE_LABEL,
    UNKNOWN_TYPE_TASK,
    Envelope,
    decode,
    encode,
)
from jobrail.transport.consuming import AmqpConsumer, Deliveries
from jobrail.transport.dead_letters import MemoryDeadLetters
from jobrail.transport.embedded_broker import EmbeddedJobBroker
from jobrail.transport.publishing import AmqpPublisher, MemoryPublisher, route
from jobrail.transport.reconnects import ConnectionWatch
from jobrail.transport.screening import Refuse, Run, screen
from jobrail.transport.topology import DELAY_HEADER, Topology
from tests.fakes import FixedClock

TOPOLOGY = Topology.from_settings(RabbitSettings(prefix="t."))
TIERS = [250, 1_000, 5_000, 30_000]


def job_body(job_type: str = "demo.echo") -> bytes:
    message = JobMessage(
        job_id=JobId(new_id()), job_type=job_type, queue="jobs.default", tenant_id="t1"
    )
    return encode(message).body


# -- admit -------------------------------------------------------------------


def test_a_job_of_a_known_type_runs_as_it_came() -> None:
    body = job_body("demo.echo")

    verdict = screen(body, lambda name: name == "demo.echo")

    assert isinstance(verdict, Run)
    assert verdict.body == body
    assert verdict.message == decode(body)


def test_a_job_of_an_unknown_type_goes_to_the_unknown_type_task_naming_its_type() -> None:
    body = job_body("other.thing")

    verdict = screen(body, lambda name: name == UNKNOWN_TYPE_TASK)

    assert isinstance(verdict, Run)
    assert verdict.message.job_type == "other.thing"
    rerouted = json.loads(verdict.body)
    assert rerouted["task_name"] == UNKNOWN_TYPE_TASK
    assert rerouted["labels"][UNKNOWN_TYPE_LABEL] == "other.thing"
    assert decode(verdict.body).job_id == verdict.message.job_id


def test_a_job_of_an_unknown_type_is_refused_where_no_unknown_type_task_is() -> None:
    assert screen(job_body("other.thing"), lambda _name: False) == Refuse(
        "unknown task 'other.thing'"
    )


@pytest.mark.parametrize(
    "body",
    [b"not json", b"\x80\x04\x95\x05\x00\x00\x00", b"[1, 2]", b'{"task_name": "demo.echo"}'],
    ids=["text", "pickle", "a list", "no task id"],
)
def test_what_is_no_job_message_is_refused_with_why(body: bytes) -> None:
    verdict = screen(body, lambda _name: True)

    assert isinstance(verdict, Refuse)
    assert verdict.reason.startswith("malformed message: ")


# -- routing -----------------------------------------------------------------


def test_a_due_message_goes_to_its_queue_on_the_work_exchange() -> None:
    clock = FixedClock()
    envelope = Envelope(queue="jobs.high", body=b"x", headers={"a": "b"}, not_before=clock.now())

    to = route(envelope, TOPOLOGY, TIERS, clock.now())

    assert (to.routing_key, to.headers, to.tier_ms) == ("t.jobs.high", {"a": "b"}, None)


def test_a_later_message_goes_through_the_largest_tier_that_fits_keeping_its_queue() -> None:
    clock = FixedClock()
    envelope = Envelope(queue="jobs.io", body=b"x", not_before=clock.now() + timedelta(seconds=7))

    to = route(envelope, TOPOLOGY, TIERS, clock.now())

    assert (to.routing_key, to.headers, to.tier_ms) == ("t.jobs.io", {DELAY_HEADER: "5000ms"}, 5000)


def test_a_dead_letter_is_routed_to_the_dead_letter_queue_and_an_unknown_queue_nowhere() -> None:
    now = FixedClock().now()
    assert route(Envelope(queue="jobs.dlq", body=b"x"), TOPOLOGY, TIERS, now).routing_key == (
        "t.jobs.dlq"
    )
    with pytest.raises(ValueError, match="unknown queue"):
        route(Envelope(queue="jobs.nope", body=b"x"), TOPOLOGY, TIERS, now)


def test_aiormq_still_publishes_without_waiting_for_the_socket_write() -> None:
    """jobrail.transport.publishing.publish_confirmed passes aiormq's `wait=False` and its
    `timeout` (the publish's only deadline)."""
    parameters = inspect.signature(aiormq.Channel.basic_publish).parameters

    assert parameters["wait"].kind is inspect.Parameter.KEYWORD_ONLY
    assert parameters["wait"].default is True
    for name in ("exchange", "routing_key", "properties", "mandatory", "timeout"):
        assert name in parameters, name


async def test_the_amqp_publisher_refuses_to_publish_before_it_is_open() -> None:
    publisher = AmqpPublisher(
        TOPOLOGY, delay_tiers_ms=TIERS, publish_timeout_s=1, clock=FixedClock()
    )

    assert not publisher.is_open
    with pytest.raises(BrokerUnavailableError, match="not connected"):
        await publisher.publish(Envelope(queue="jobs.default", body=b"x"))


# -- the in-memory publisher and dead letters -----------------------------------


def memory_publisher(
    clock: FixedClock,
) -> tuple[MemoryPublisher, list[Envelope], MemoryDeadLetters]:
    delivered: list[Envelope] = []
    dead = MemoryDeadLetters("jobs.dlq")
    publisher = MemoryPublisher(
        queues=["jobs.default"], dead_letters=dead, deliver=delivered.append, clock=clock
    )
    return publisher, delivered, dead


async def test_the_memory_publisher_delivers_what_is_due_and_holds_the_rest_on_a_timer() -> None:
    clock = FixedClock()
    publisher, delivered, dead = memory_publisher(clock)
    due = Envelope(queue="jobs.default", body=b"now")
    later = Envelope(
        queue="jobs.default", body=b"later", not_before=clock.now() + timedelta(hours=1)
    )

    await publisher.publish(due)
    await publisher.publish(later)

    assert delivered == [due]
    assert publisher.delayed == 1
    publisher.cancel_delayed()
    assert publisher.delayed == 0
    assert len(dead) == 0


async def test_the_memory_publisher_delivers_a_delayed_message_when_its_timer_fires() -> None:
    clock = FixedClock()
    publisher, delivered, _dead = memory_publisher(clock)
    soon = Envelope(
        queue="jobs.default", body=b"soon", not_before=clock.now() + timedelta(milliseconds=5)
    )

    await publisher.publish(soon)
    async with asyncio.timeout(5):
        while not delivered:
            await asyncio.sleep(0.005)

    assert delivered == [soon]
    assert publisher.delayed == 0


async def test_the_memory_publisher_keeps_dead_letters_and_refuses_unknown_queues() -> None:
    publisher, delivered, dead = memory_publisher(FixedClock())

    await publisher.publish(Envelope(queue="jobs.dlq", body=b"dead"))
    with pytest.raises(ValueError, match="unknown queue"):
        await publisher.publish(Envelope(queue="jobs.nope", body=b"x"))

    assert delivered == []
    assert [letter.preview for letter in await dead.peek(10)] == ["dead"]


async def test_memory_dead_letters_let_go_what_is_decided_and_keep_the_rest_in_order() -> None:
    dead = MemoryDeadLetters("jobs.dlq")
    for n in range(4):
        dead.append(Envelope(queue="jobs.dlq", body=f"letter {n}".encode()))

    async def odd(letter: Any) -> bool:
        return str(letter.preview).endswith(("1", "3"))

    await dead.settle(odd, limit=2)  # looks at the first two only

    assert [letter.preview for letter in await dead.peek(10)] == [
        "letter 0",
        "letter 2",
        "letter 3",
    ]
    assert await dead.purge() == 3
    assert await dead.peek(10) == []


def test_memory_dead_letters_drop_the_oldest_beyond_their_capacity() -> None:
    dead = MemoryDeadLetters("jobs.dlq", capacity=2)
    for n in range(3):
        dead.append(Envelope(queue="jobs.dlq", body=f"{n}".encode()))

    assert len(dead) == 2


async def test_the_embedded_broker_dead_letters_what_it_cannot_run_with_why() -> None:
    broker = EmbeddedJobBroker(RabbitSettings())

    await broker.publish(Envelope(queue="jobs.io", body=b"not json"))
    await broker.publish(Envelope(queue="jobs.default", body=job_body("other.thing")))

    letters = await broker.peek_dead_letters(10)
    assert [(letter.source_queue, letter.reason.split(":")[0]) for letter in letters] == [
        ("jobs.io", "malformed message"),
        ("jobs.default", "unknown task 'other.thing'"),
    ]


class HeldReceiver:
    """Stands in for the worker's receiver: each job runs until `release` is set."""

    def __init__(self) -> None:
        self.running = 0
        self.most = 0
        self.finished = 0
        self.release = asyncio.Event()

    async def callback(self, message: bytes, raise_err: bool = False) -> None:
        self.running += 1
        self.most = max(self.most, self.running)
        try:
            await self.release.wait()
            self.finished += 1
        finally:
            self.running -= 1


def embedded_with(
    receiver: HeldReceiver, max_running: int, shutdown_grace_s: float = 5
) -> EmbeddedJobBroker:
    broker = EmbeddedJobBroker(
        RabbitSettings(), max_running=max_running, shutdown_grace_s=shutdown_grace_s
    )
    broker.register_task(lambda: None, task_name="demo.echo")
    broker.receiver = receiver  # type: ignore[assignment]
    return broker


async def publish_jobs(broker: EmbeddedJobBroker, *queues: str) -> None:
    """A job message on each of `queues`, then a few loop turns for the jobs to start."""
    for queue in queues:
        await broker.publish(Envelope(queue=queue, body=job_body()))
    await loop_turns()


async def loop_turns() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_the_embedded_broker_runs_at_most_max_running_jobs_at_once() -> None:
    # Unbounded, a thousand sleeping jobs all renewed their leases at once, and the
    # embedded database could not confirm the renewals in time.
    receiver = HeldReceiver()
    broker = embedded_with(receiver, max_running=3)

    await publish_jobs(broker, *["jobs.default"] * 10)
    assert receiver.running == 3
    receiver.release.set()
    await broker.wait_all()

    assert receiver.finished == 10
    assert receiver.most == 3


async def test_jobs_waiting_for_a_slot_are_counted_as_their_queue_s_ready_messages() -> None:
    receiver = HeldReceiver()
    broker = embedded_with(receiver, max_running=2)
    await publish_jobs(broker, "jobs.io", "jobs.io", "jobs.io", "jobs.default")

    depths = {depth.queue: depth.ready for depth in await broker.queue_depths()}
    assert (receiver.running, depths["jobs.io"], depths["jobs.default"]) == (2, 1, 1)
    receiver.release.set()
    await broker.wait_all()
    depths = {depth.queue: depth.ready for depth in await broker.queue_depths()}
    assert (receiver.finished, depths["jobs.io"], depths["jobs.default"]) == (4, 0, 0)


async def test_embedded_shutdown_drops_the_jobs_not_started_and_lets_the_running_finish() -> None:
    receiver = HeldReceiver()
    broker = embedded_with(receiver, max_running=2)
    await publish_jobs(broker, *["jobs.default"] * 6)

    stopping = asyncio.create_task(broker.shutdown())
    await loop_turns()
    receiver.release.set()
    await stopping

    # The 4 that waited for a slot never started (their jobs stay pending in the
    # database, and run when the process starts again); the 2 running finished.
    assert receiver.finished == 2
    assert receiver.most == 2


async def test_a_message_sent_while_the_embedded_broker_stops_is_not_started() -> None:
    # A retry's or a chain's next step, sent by a job that finishes during the grace
    # period: its job stays unfinished in the database, and resumes at the next start.
    receiver = HeldReceiver()
    broker = embedded_with(receiver, max_running=2)
    await publish_jobs(broker, "jobs.default")

    stopping = asyncio.create_task(broker.shutdown())
    await loop_turns()
    await publish_jobs(broker, "jobs.default")
    receiver.release.set()
    await stopping

    assert receiver.finished == 1
    assert receiver.most == 1


@pytest.mark.parametrize("when", ["while the shutdown waits", "before the shutdown"])
async def test_a_hurried_embedded_shutdown_stops_running_jobs_without_their_grace(
    when: str,
) -> None:
    # A forced exit (Ctrl-C again): the jobs stay claimed in the database and resume
    # after their lease when the process starts again, as those past the grace do.
    receiver = HeldReceiver()
    broker = embedded_with(receiver, max_running=2, shutdown_grace_s=3600)
    await publish_jobs(broker, "jobs.default", "jobs.default")
    assert receiver.running == 2

    if when == "before the shutdown":
        broker.hurry()
    stopping = asyncio.create_task(broker.shutdown())
    await loop_turns()
    if when == "while the shutdown waits":
        assert not stopping.done()  # the running jobs have their grace
        broker.hurry()
    await asyncio.wait_for(stopping, 10)

    assert (receiver.running, receiver.finished) == (0, 0)


# -- the AMQP consumer's transport part ----------------------------------------


class Incoming:
    """What the consumer uses of aio-pika's IncomingMessage."""

    def __init__(self, body: bytes, headers: dict[str, Any] | None = None) -> None:
        self.body = body
        self.headers = headers or {}
        self.message_id = "m-1"
        self.settled: list[str] = []

    async def ack(self) -> None:
        self.settled.append("ack")

    async def nack(self, requeue: bool = True) -> None:
        self.settled.append(f"nack requeue={requeue}")


class Queue:
    def __init__(self, name: str, messages: list[Incoming]) -> None:
        self.name = name
        self._messages = messages

    @asynccontextmanager
    async def iterator(self) -> AsyncIterator[AsyncIterator[Incoming]]:
        async def each() -> AsyncIterator[Incoming]:
            for message in self._messages:
                yield message

        yield each()


def consumer(published: list[Envelope], *, unavailable: bool = False) -> AmqpConsumer:
    async def publish(envelope: Envelope) -> None:
        if unavailable:
            raise BrokerUnavailableError("down")
        published.append(envelope)

    return AmqpConsumer(
        topology=TOPOLOGY,
        has_task=lambda name: name == "demo.echo",
        publish=publish,
        clock=FixedClock(),
        watch=ConnectionWatch(),
    )


async def test_the_consumer_yields_what_runs_with_an_ack_and_parks_the_rest() -> None:
    good = Incoming(job_body("demo.echo"))
    bad = Incoming(b"not json", headers={"x-death": [{}], "origin": "test"})
    published: list[Envelope] = []

    out = [m async for m in consumer(published).consume(Queue("t.jobs.io", [bad, good]))]

    assert all(isinstance(m, AckableMessage) for m in out)
    assert [m.data for m in out] == [good.body]
    assert good.settled == []
    await out[0].ack()
    assert good.settled == ["ack"]
    [letter] = published
    assert letter.queue == "jobs.dlq"
    assert letter.body == b"not json"
    assert letter.headers[HEADER_REASON].startswith("malformed message: ")
    assert letter.headers[HEADER_SOURCE_QUEUE] == "jobs.io"
    assert letter.headers["origin"] == "test"
    assert "x-death" not in letter.headers
    assert letter.message_id == "m-1"
    assert bad.settled == ["ack"]


async def test_a_refused_message_the_dlq_cannot_take_goes_back_to_its_queue(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(consuming, "REQUEUE_AFTER_S", 0)
    bad = Incoming(job_body("other.thing"))

    out = [m async for m in consumer([], unavailable=True).consume(Queue("t.jobs.io", [bad]))]

    assert out == []
    assert bad.settled == ["nack requeue=True"]


# -- Deliveries: the consumers of several queues as one stream ----------------------


async def test_deliveries_merge_several_streams_and_end_when_all_have_ended() -> None:
    async def each(*items: str) -> AsyncIterator[str]:
        for item in items:
            yield item
            await asyncio.sleep(0)

    merged = [item async for item in Deliveries([each("a", "b"), each("c")])]

    assert sorted(merged) == ["a", "b", "c"]


async def test_what_has_arrived_is_taken_at_once_oldest_first() -> None:
    arrived = asyncio.Event()

    async def stream() -> AsyncIterator[int]:
        for n in range(5):
            yield n
        arrived.set()
        await asyncio.Event().wait()  # a consumer whose queue is empty for now

    deliveries = Deliveries([stream()])
    await arrived.wait()

    assert await anext(deliveries) == 0
    assert deliveries.take_ready(3) == [1, 2, 3]
    assert deliveries.take_ready(10) == [4]
    assert deliveries.take_ready(10) == []
    await deliveries.close()


async def test_what_ends_a_stream_is_raised_after_what_arrived_before_it() -> None:
    async def failing() -> AsyncIterator[str]:
        yield "first"
        raise RuntimeError("channel gone for good")

    async def waiting() -> AsyncIterator[str]:
        await asyncio.Event().wait()
        yield "never"

    deliveries = Deliveries([failing(), waiting()])

    assert await anext(deliveries) == "first"
    with pytest.raises(RuntimeError, match="channel gone"):
        await anext(deliveries)
    await deliveries.close()


async def test_closing_stops_every_stream() -> None:
    stopped: list[str] = []

    async def stream(name: str) -> AsyncIterator[str]:
        try:
            yield name
            await asyncio.Event().wait()
        finally:
            stopped.append(name)

    deliveries = Deliveries([stream("a"), stream("b")])
    assert await anext(deliveries) in {"a", "b"}

    await deliveries.close()

    assert sorted(stopped) == ["a", "b"]
