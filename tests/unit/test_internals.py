"""What jobrail relies on past taskiq-aio-pika's public API
(jobrail.transport.internals): an upgrade that changes it fails here."""

import inspect
from typing import Any

from taskiq import TaskiqEvents
from taskiq_aio_pika import AioPikaBroker, Exchange, Queue

from jobrail.transport import internals


class Declared:
    def __init__(self, name: str) -> None:
        self.name = name
        self.bound: list[tuple[str, str]] = []

    async def bind(self, exchange: str, routing_key: str, **_kwargs: Any) -> None:
        self.bound.append((exchange, routing_key))


class Channel:
    """The calls taskiq-aio-pika's declarations make on an aio-pika channel."""

    def __init__(self) -> None:
        self.exchanges: list[str] = []
        self.queues: dict[str, Declared] = {}
        self.arguments: dict[str, dict[str, Any]] = {}
        self.looked_up: list[str] = []
        self.closed = False

    async def declare_exchange(self, name: str, **_kwargs: Any) -> None:
        self.exchanges.append(name)

    async def declare_queue(self, name: str, arguments: dict[str, Any], **_kw: Any) -> Declared:
        self.arguments[name] = arguments
        self.queues[name] = Declared(name)
        return self.queues[name]

    async def get_queue(self, name: str, ensure: bool = True) -> Declared:
        self.looked_up.append(name)
        return Declared(name)

    async def close(self) -> None:
        self.closed = True


class Connection(Channel):
    pass


def broker() -> AioPikaBroker:
    return AioPikaBroker(
        exchange=Exchange(name="work"),
        task_queues=[Queue(name="q1", arguments={"x-delivery-limit": 20}), Queue(name="q2")],
        dead_letter_queue=Queue(name="dlq", declare=False),
    )


def test_the_private_methods_used_keep_their_signatures() -> None:
    for name, parameters in (
        ("_declare_exchanges", ["self"]),
        ("_declare_queues", ["self", "channel"]),
    ):
        method = getattr(AioPikaBroker, name)
        assert inspect.iscoroutinefunction(method), name
        assert list(inspect.signature(method).parameters) == parameters, name


def test_a_new_broker_has_the_connection_attributes_it_declares_and_shuts_down_with() -> None:
    fresh = broker()

    for attribute in ("write_conn", "write_channel", "read_conn", "read_channel"):
        assert getattr(fresh, attribute) is None, attribute


async def test_declarations_run_on_the_attached_channels_and_return_the_work_queues() -> None:
    fresh, write, channel = broker(), Connection(), Channel()
    internals.attach_connections(fresh, write=write, write_channel=channel)

    await internals.declare_exchanges(fresh)
    queues = await internals.declare_queues(fresh, channel)

    assert channel.exchanges == ["work"]
    assert [queue.name for queue in queues] == ["q1", "q2"]
    assert [queue.bound for queue in queues] == [[("work", "q1")], [("work", "q2")]]
    # The DLQ is only checked (jobrail declares it), and the work queues dead-letter to it
    # with jobrail's own arguments kept.
    assert channel.looked_up == ["dlq"]
    assert channel.arguments["q1"]["x-dead-letter-routing-key"] == "dlq"
    assert channel.arguments["q1"]["x-delivery-limit"] == 20
    assert channel.arguments["q1"]["x-queue-type"] == "quorum"


async def test_shutdown_closes_the_attached_connections() -> None:
    fresh = broker()
    write, write_channel, read, read_channel = Connection(), Channel(), Connection(), Channel()
    internals.attach_connections(
        fresh,
        write=write,
        write_channel=write_channel,
        read=read,
        read_channel=read_channel,
    )

    await fresh.shutdown()

    assert [write.closed, write_channel.closed, read.closed, read_channel.closed] == [True] * 4


async def test_taskiqs_start_up_runs_its_events_without_connecting() -> None:
    fresh = broker()
    started: list[object] = []
    fresh.add_event_handler(TaskiqEvents.CLIENT_STARTUP, started.append)

    await internals.taskiq_startup(fresh)

    assert started == [fresh.state]
    assert fresh.write_conn is None
