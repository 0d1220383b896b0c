"""Several RabbitMQ nodes in one URL (jobrail.settings.rabbit), the order a process tries
them in (jobrail.transport.nodes.Nodes), and the fast path's left-over line
(jobrail.outbox.left_over)."""

import asyncio
import logging
import random

import pytest

from jobrail.outbox.left_over import LeftToRelayLog
from jobrail.settings import SettingsError, load_settings
from jobrail.settings.rabbit import RabbitSettings
from jobrail.transport.nodes import Nodes


@pytest.mark.parametrize(
    ("url", "nodes"),
    [
        (
            "amqp://u:s3cret@10.0.0.1:5681,10.0.0.2:5682,10.0.0.3/prod?heartbeat=10",
            [
                "amqp://u:s3cret@10.0.0.1:5681/prod?heartbeat=10",
                "amqp://u:s3cret@10.0.0.2:5682/prod?heartbeat=10",
                "amqp://u:s3cret@10.0.0.3/prod?heartbeat=10",
            ],
        ),
        (
            "amqps://u:p@r1.internal/, amqps://u:p@r2.internal/",
            ["amqps://u:p@r1.internal/", "amqps://u:p@r2.internal/"],
        ),
        ("amqp://u:p%2C%40@[::1]:5672,h2", ["amqp://u:p%2C%40@[::1]:5672", "amqp://u:p%2C%40@h2"]),
        ("amqp://guest:guest@127.0.0.1:5672/", ["amqp://guest:guest@127.0.0.1:5672/"]),
    ],
)
def test_a_url_names_one_node_or_several(
    monkeypatch: pytest.MonkeyPatch, url: str, nodes: list[str]
) -> None:
    monkeypatch.setenv("JOBRAIL_RABBIT__URL", url)

    assert load_settings().rabbit.node_urls() == nodes


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("amqp://u:s3cret@h1:5681,h2:99999/", "host 2: its host or port does not parse"),
        ("amqp://u:s3cret@h1:5681,,h2/", "host 2 is empty"),
        ("amqp://u:s3cret@h1/,http://u:s3cret@h2/", "use an amqp:// or amqps:// URL"),
        ("amqp://u:s3cret@h1/,amqp://u:other@h2/", "differ in more than host and port"),
        ("amqp://u:s3cret@h1/a,amqp://u:s3cret@h2/b", "differ in more than host and port"),
    ],
)
def test_a_bad_node_is_named_and_the_password_never_shown(
    monkeypatch: pytest.MonkeyPatch, url: str, reason: str
) -> None:
    monkeypatch.setenv("JOBRAIL_RABBIT__URL", url)

    with pytest.raises(SettingsError) as caught:
        load_settings()

    message = str(caught.value)
    assert "JOBRAIL_RABBIT__URL" in message
    assert reason in message
    assert "s3cret" not in message


def test_the_nodes_are_shuffled_per_process_unless_in_order() -> None:
    url = "amqp://u:p@a:1,b:2,c:3,d:4/"
    in_order = RabbitSettings(url=url, node_order="in_order")  # type: ignore[arg-type]

    assert RabbitSettings().node_order == "shuffled"
    assert Nodes(in_order.node_urls(), shuffle=False).addresses == ["a:1", "b:2", "c:3", "d:4"]
    shuffled = Nodes(in_order.node_urls(), shuffle=True, rng=random.Random(3)).addresses
    assert sorted(shuffled) == ["a:1", "b:2", "c:3", "d:4"]
    assert shuffled != ["a:1", "b:2", "c:3", "d:4"]


def test_a_failed_node_sends_the_next_attempt_round_the_list() -> None:
    nodes = Nodes(["amqp://a:1", "amqp://b:2", "amqp://c:3"], shuffle=False)
    nodes.connected("a:1")

    nodes.failed("a:1")
    nodes.failed("a:1")  # the second connection losing the same node moves nothing
    assert nodes.order_from_current() == ["b:2", "c:3", "a:1"]
    nodes.failed("b:2")
    nodes.failed("c:3")
    assert nodes.current == "a:1"


def test_a_move_is_one_warning_for_all_the_connections_of_a_process(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, "jobrail.broker")
    nodes = Nodes(["amqp://a:1", "amqp://b:2"], shuffle=False)

    nodes.connected("a:1")
    nodes.connected("a:1")  # publishing and consuming connections
    nodes.failed("a:1")
    nodes.connected("b:2")
    nodes.connected("b:2")

    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == ["moved from RabbitMQ node a:1 to b:2 (the nodes: a:1, b:2)"]
    assert nodes.connected_to == "b:2"


async def test_what_the_fast_path_leaves_is_said_once_then_summed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, "jobrail.outbox")
    left = LeftToRelayLog(every_s=0.2)

    for _ in range(50):
        left.note(2, "not connected to RabbitMQ")
    lines = [r.getMessage() for r in caplog.records]
    assert lines == ["fast path left 2 messages to the relay: not connected to RabbitMQ"]

    async with asyncio.timeout(10):
        while len(caplog.records) < 2:
            await asyncio.sleep(0.05)
    assert caplog.records[1].getMessage().startswith("fast path left 98 messages to the relay")
    # Nothing more left: no more lines, and the next one is said at once again.
    await asyncio.sleep(0.5)
    assert len(caplog.records) == 2
    left.note(1, "again")
    assert caplog.records[-1].getMessage() == "fast path left 1 messages to the relay: again"
