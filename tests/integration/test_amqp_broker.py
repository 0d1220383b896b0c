"""jobrail's topology on the real RabbitMQ: delay tiers, routing back, dead letters."""

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import Any

import pytest

from jobrail.jobs.messages import JobMessage
from jobrail.kernel.clock import SystemClock
from jobrail.kernel.errors import BrokerUnavailableError
from jobrail.settings import Settings
from jobrail.transport.amqp_broker import AmqpJobBroker
from jobrail.transport.codec import Envelope, encode
from tests.fakes import make_job
from tests.support.rabbit import RabbitProbe
from tests.support.services import wait_for
from tests.support.tcp_proxy import TcpProxy


@pytest.fixture
async def broker(stack_settings: Settings, rabbit: RabbitProbe) -> AsyncIterator[AmqpJobBroker]:
    broker = AmqpJobBroker(stack_settings.rabbit)
    await broker.startup()
    yield broker
    await broker.shutdown()


@asynccontextmanager
async def _broker_at(
    stack_settings: Settings, url: str, **update: Any
) -> AsyncIterator[AmqpJobBroker]:
    """A broker of the test's stack, connecting to `url` instead."""
    settings = stack_settings.rabbit.model_copy(
        update={"url": stack_settings.rabbit.url.__class__(url), **update}
    )
    broker = AmqpJobBroker(settings)
    await broker.startup()
    try:
        yield broker
    finally:
        await broker.shutdown()


@asynccontextmanager
async def _broker_behind_proxy(
    stack_settings: Settings,
) -> AsyncIterator[tuple[AmqpJobBroker, TcpProxy]]:
    """A broker whose connection goes through a proxy that can hold RabbitMQ's replies
    (its confirms), with a publish deadline of 0.5 s."""
    async with TcpProxy(5672) as proxy:
        url = f"amqp://guest:guest@127.0.0.1:{proxy.port}/"
        async with _broker_at(stack_settings, url, publish_timeout_s=0.5) as broker:
            try:
                yield broker, proxy
            finally:
                proxy.pass_replies()


async def _arrival(
    rabbit: RabbitProbe, queue: str, timeout: float, since: float | None = None
) -> tuple[bytes, float]:
    """The message that arrives on `queue`, and how long after `since` (else now)."""
    start = time.monotonic() if since is None else since

    async def one() -> list[object]:
        return await rabbit.drain(rabbit.topology.queues[queue])

    [message] = await wait_for(one, timeout=timeout, interval=0.02, what=f"a message on {queue}")
    return message.body, time.monotonic() - start  # type: ignore[attr-defined]


async def test_a_short_delay_is_not_held_up_behind_a_long_one(
    broker: AmqpJobBroker, rabbit: RabbitProbe
) -> None:
    clock = SystemClock()
    await broker.publish(
        Envelope(queue="jobs.default", body=b"long", not_before=clock.now() + timedelta(seconds=31))
    )
    # Due 260 ms from its own publish (not from before the first one's confirm, which can
    # take longer than 10 ms on a busy machine: the rest would fit no tier).
    sent = time.monotonic()
    await broker.publish(
        Envelope(
            queue="jobs.high", body=b"short", not_before=clock.now() + timedelta(milliseconds=260)
        )
    )

    body, waited = await _arrival(rabbit, "jobs.high", timeout=5, since=sent)

    assert body == b"short"
    assert 0.2 < waited < 2.0  # the 250 ms tier
    assert (await rabbit.depth(rabbit.topology.queues["jobs.default"]))[0] == 0
    assert (await rabbit.depth(rabbit.topology.delay_queues[30_000]))[0] == 1


async def test_a_due_message_goes_straight_to_its_queue(
    broker: AmqpJobBroker, rabbit: RabbitProbe
) -> None:
    await broker.publish(Envelope(queue="jobs.io", body=b"now"))

    body, waited = await _arrival(rabbit, "jobs.io", timeout=2)

    assert body == b"now"
    assert waited < 0.5


async def test_dead_letters_land_in_the_dlq_with_their_headers(
    broker: AmqpJobBroker, rabbit: RabbitProbe
) -> None:
    await broker.publish(
        Envelope(queue="jobs.dlq", body=b"bad", headers={"x-jobrail-reason": "because"})
    )

    async def parked() -> list[object]:
        return await rabbit.drain(rabbit.topology.dead_letter_queue)

    [dead] = await wait_for(parked, what="the dead letter")
    assert dead.body == b"bad"  # type: ignore[attr-defined]
    assert dead.headers["x-jobrail-reason"] == "because"  # type: ignore[attr-defined]


async def test_publishing_while_disconnected_fails_fast(stack_settings: Settings) -> None:
    settings = stack_settings.rabbit.model_copy(
        update={"url": stack_settings.rabbit.url.__class__("amqp://guest:guest@127.0.0.1:1/")}
    )
    broker = AmqpJobBroker(settings)
    await broker.startup()
    try:
        started = time.monotonic()
        with pytest.raises(BrokerUnavailableError):
            await broker.publish(Envelope(queue="jobs.default", body=b"x"))
        assert time.monotonic() - started < 0.5
        assert not broker.is_connected
    finally:
        await broker.shutdown()
    await asyncio.sleep(0)


async def test_a_lost_connection_is_back_within_the_reconnect_interval(
    stack_settings: Settings,
) -> None:
    """RabbitMQ away for a second: the broker publishes again about one reconnect
    interval after it is back (aio-pika's own 5 s would leave it waiting up to 5 s)."""
    async with TcpProxy(5672) as proxy:
        url = f"amqp://guest:guest@127.0.0.1:{proxy.port}/"
        settings = stack_settings.rabbit.model_copy(
            update={
                "url": stack_settings.rabbit.url.__class__(url),
                "publish_timeout_s": 0.5,
                "reconnect_interval_s": 0.2,
            }
        )
        broker = AmqpJobBroker(settings)
        await broker.startup()
        try:
            await broker.publish(Envelope(queue="jobs.io", body=b"before"))
            await proxy.take_down()
            await asyncio.sleep(1.0)  # several attempts fail meanwhile
            await proxy.accept()
            back = time.monotonic()

            async def published() -> bool:
                try:
                    await broker.publish(Envelope(queue="jobs.io", body=b"after"))
                except BrokerUnavailableError:
                    return False
                return True

            await wait_for(published, timeout=30, interval=0.05, what="a publish")
            waited = time.monotonic() - back
        finally:
            await broker.shutdown()
    print(f"published again {waited:.2f}s after RabbitMQ was back")
    assert waited < 3.0


async def test_a_publish_rabbitmq_never_confirms_fails_at_its_deadline(
    stack_settings: Settings,
) -> None:
    async with _broker_behind_proxy(stack_settings) as (broker, proxy):
        await broker.publish(Envelope(queue="jobs.io", body=b"confirmed"))
        proxy.hold_replies()  # the message reaches RabbitMQ; its confirm never comes back
        with pytest.raises(BrokerUnavailableError, match=r"publish to \S+ failed"):
            # Bounded only so that a publish that waits for good fails the test.
            await asyncio.wait_for(
                broker.publish(Envelope(queue="jobs.io", body=b"unconfirmed")), 60
            )


async def test_concurrent_publishes_are_each_confirmed_and_arrive_whole(
    broker: AmqpJobBroker, rabbit: RabbitProbe
) -> None:
    sent = [
        Envelope(queue="jobs.io", body=f"m{n}".encode(), headers={"x-jobrail-n": str(n)})
        for n in range(200)
    ]

    await asyncio.gather(*(broker.publish(envelope) for envelope in sent))

    queue = rabbit.topology.queues["jobs.io"]
    assert (await rabbit.depth(queue))[0] == 200  # confirmed, so already on the queue
    arrived = await rabbit.drain(queue)
    assert sorted((m.body, m.headers["x-jobrail-n"]) for m in arrived) == sorted(
        (e.body, e.headers["x-jobrail-n"]) for e in sent
    )


async def test_a_publish_rabbitmq_cannot_route_fails_instead_of_vanishing(
    broker: AmqpJobBroker, rabbit: RabbitProbe
) -> None:
    await rabbit.channel.queue_delete(rabbit.topology.queues["jobs.io"])

    with pytest.raises(BrokerUnavailableError, match=r"publish to .* failed"):
        await broker.publish(Envelope(queue="jobs.io", body=b"nowhere"))
    await broker.publish(Envelope(queue="jobs.high", body=b"still fine"))  # channel is usable


async def test_a_worker_takes_every_delivery_that_has_arrived_at_once(
    stack_settings: Settings, rabbit: RabbitProbe
) -> None:
    worker = AmqpJobBroker(stack_settings.rabbit, consume=["jobs.io"])
    worker.is_worker_process = True

    async def echo() -> None: ...

    worker.register_task(echo, task_name="test.echo")
    await worker.startup()
    listening = worker.listen()
    try:
        jobs = [make_job(type="test.echo", queue="jobs.io") for _ in range(20)]
        await asyncio.gather(*(worker.publish(encode(JobMessage.of(j))) for j in jobs))
        first = await asyncio.wait_for(anext(listening), 10)
        taken = [first]

        async def all_taken() -> bool:
            taken.extend(worker.take_ready(100))
            return len(taken) >= len(jobs)

        await wait_for(all_taken, timeout=10, interval=0.02, what="the other deliveries")

        assert sorted(m.job.job_id for m in taken) == sorted(j.id for j in jobs)  # type: ignore[attr-defined]
        assert worker.take_ready(100) == []
        for message in taken:
            await message.ack()  # type: ignore[misc]
    finally:
        await listening.aclose()
        await worker.shutdown()


async def test_publish_many_routes_each_envelope_and_says_which_failed(
    broker: AmqpJobBroker, rabbit: RabbitProbe
) -> None:
    """One write for the batch (jobrail.transport.internals), each envelope routed as
    `publish` routes it: due ones to their queue, a later one through its delay tier, a
    dead letter to the DLQ; one to a queue the topology lacks fails alone."""
    later = SystemClock().now() + timedelta(seconds=31)
    sent = [
        Envelope(queue="jobs.io", body=b"m0"),
        Envelope(queue="jobs.nowhere", body=b"lost"),
        Envelope(queue="jobs.default", body=b"later", not_before=later),
        Envelope(queue="jobs.dlq", body=b"dead", headers={"x-jobrail-reason": "because"}),
        Envelope(queue="jobs.io", body=b"m1"),
    ]

    outcomes = await broker.publish_many(sent, 10)

    assert [outcome is None for outcome in outcomes] == [True, False, True, True, True]
    assert isinstance(outcomes[1], BrokerUnavailableError)
    arrived = await rabbit.drain(rabbit.topology.queues["jobs.io"])
    assert [m.body for m in arrived] == [b"m0", b"m1"]  # confirmed, so on the queue, in order
    assert (await rabbit.depth(rabbit.topology.delay_queues[30_000]))[0] == 1
    assert [m.body for m in await rabbit.drain(rabbit.topology.dead_letter_queue)] == [b"dead"]


async def test_publish_many_says_each_failed_when_rabbitmq_cannot_be_reached(
    stack_settings: Settings,
) -> None:
    async with _broker_at(stack_settings, "amqp://guest:guest@127.0.0.1:1/") as broker:
        envelopes = [Envelope(queue="jobs.io", body=b"x") for _ in range(2)]
        outcomes = await broker.publish_many(envelopes, 1)

    assert all(isinstance(outcome, BrokerUnavailableError) for outcome in outcomes)


async def test_publish_many_past_rabbitmq_s_confirms_deadline_says_so_for_each(
    stack_settings: Settings,
) -> None:
    async with _broker_behind_proxy(stack_settings) as (broker, proxy):
        assert await broker.publish_many([Envelope(queue="jobs.io", body=b"ok")]) == [None]
        proxy.hold_replies()  # the messages reach RabbitMQ; their confirms never come back
        started = time.monotonic()
        envelopes = [Envelope(queue="jobs.io", body=b"x") for _ in range(3)]
        outcomes = await asyncio.wait_for(broker.publish_many(envelopes), 60)
        waited = time.monotonic() - started

    assert all(isinstance(outcome, BrokerUnavailableError) for outcome in outcomes)
    assert "TimeoutError" in str(outcomes[0])
    assert waited < 30  # the publisher's own deadline, not a wait for good


async def test_the_ready_gauge_counts_what_waits_now_every_time_it_is_asked(
    broker: AmqpJobBroker,
) -> None:
    # The dispatcher's credit (jobrail.dispatch): a count stale by one publish would let
    # it release more than the workers can take.
    counts = [await broker.ready("jobs.default")]
    for _ in range(3):
        job = make_job()
        message = JobMessage(job.id, job.type, "jobs.default", job.tenant_id)
        await broker.publish(encode(message))
        counts.append(await broker.ready("jobs.default"))

    assert counts == [0, 1, 2, 3]
