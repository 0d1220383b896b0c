"""The broker, RabbitMQ: its URL, the exchange, the work queues, the dead-letter queue and
the delay tiers (see jobrail.transport.topology), and how a worker holds deliveries.

The URL may name several nodes of a cluster, in the form other AMQP clients take
(``amqp://user:pass@host1:5672,host2:5672/vhost``) or as several URLs separated by commas
(``amqp://…@host1/,amqp://…@host2/``); see `node_urls` and jobrail.transport.nodes."""

import re
from typing import Annotated, Literal, Self
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator
from pydantic_settings import NoDecode

from jobrail.settings.values import PositiveFloat, PositiveInt, check_address, comma_list


class RabbitSettings(BaseModel):
    model_config = ConfigDict(hide_input_in_errors=True)  # the URL holds the password

    url: SecretStr = SecretStr("amqp://guest:guest@127.0.0.1:5672/")
    """One node, or several of a cluster: ``amqp://user:pass@h1:5672,h2:5672/vhost``, or
    URLs separated by commas that differ only in host and port (see `node_order`)."""
    node_order: Literal["shuffled", "in_order"] = "shuffled"
    """The order in which a process tries the URL's nodes: each process shuffles them once
    at start (its connections spread over the cluster), or takes them as written. On the
    loss of its node a process moves to the next one, round the list."""
    prefix: str = Field(
        default="",
        pattern=r"^[A-Za-z0-9_.-]*$",
        description="Prepended to every exchange and queue name (isolates test runs).",
    )
    exchange: str = "jobrail"
    queues: Annotated[list[str], NoDecode] = ["jobs.default", "jobs.high", "jobs.io", "jobs.heavy"]
    default_queue: str = "jobs.default"
    dead_letter_queue: str = "jobs.dlq"
    delay_tiers_ms: Annotated[list[PositiveInt], NoDecode] = [
        25,
        100,
        250,
        1_000,
        5_000,
        30_000,
        120_000,
        600_000,
        3_600_000,
    ]
    prefetch: PositiveInt = 128
    """Unacknowledged deliveries a worker process holds: as many as it runs at once
    (``worker.max_async_tasks``), so that none waits in the process for a slot while
    another worker is idle, and enough for the worker's batches (``jobrail.kernel.batching``):
    with 32 its batches were smaller and it ran far fewer jobs per second (figures in
    bench/README.md)."""
    connect_timeout_s: PositiveFloat = 5.0
    reconnect_interval_s: PositiveFloat = 1.0
    """How long a lost connection waits between reconnection attempts (aio-pika's robust
    connection; its own default is 5 s). After RabbitMQ restarts, the relay, the
    consumers and the API's fast path are back within about this long; each failed
    attempt is one connect and no log record above DEBUG (jobrail.transport.reconnects)."""
    publish_timeout_s: PositiveFloat = 5.0
    quorum_queues: bool = True

    _split_queues = field_validator("queues", "delay_tiers_ms", mode="before")(comma_list)

    @field_validator("url")
    @classmethod
    def _amqp_url(cls, url: SecretStr) -> SecretStr:
        split_nodes(url.get_secret_value())
        return url

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        if not self.queues:
            raise ValueError("queues: at least one work queue is needed")
        if self.default_queue not in self.queues:
            raise ValueError(f"default_queue {self.default_queue!r} is not one of queues")
        if self.dead_letter_queue in self.queues:
            raise ValueError("dead_letter_queue must not also be a work queue")
        if not self.delay_tiers_ms:
            raise ValueError("delay_tiers_ms: at least one delay tier is needed")
        self.delay_tiers_ms = sorted(set(self.delay_tiers_ms))
        return self

    def name(self, name: str) -> str:
        return f"{self.prefix}{name}"

    def node_urls(self) -> list[str]:
        """One URL per node, in the order written (each holds the password)."""
        return split_nodes(self.url.get_secret_value())


# Where a URL of the list starts: a comma followed by a scheme (amqp://, or a wrong one).
_NEXT_URL = re.compile(r",\s*(?=[A-Za-z][A-Za-z0-9+.-]*://)")


def split_nodes(text: str) -> list[str]:
    """The node URLs `text` names: several URLs separated by commas, each of which may
    list several hosts (``amqp://user:pass@h1:5672,h2:5672/vhost``), the user, password,
    virtual host and query shared by its hosts. ValueError, never quoting the text (it
    holds the password), when one does not parse as aio-pika will parse it."""
    urls: list[str] = []
    parts = _NEXT_URL.split(text.strip())
    for at, part in enumerate(parts, start=1):
        where = f"URL {at} of {len(parts)}: " if len(parts) > 1 else ""
        scheme, sep, rest = part.strip().partition("://")
        if not sep or scheme not in {"amqp", "amqps"}:
            raise ValueError(f"{where}use an amqp:// or amqps:// URL")
        end = len(rest)
        for stop in "/?#":
            found = rest.find(stop)
            if found != -1:
                end = min(end, found)
        authority, tail = rest[:end], rest[end:]
        userinfo, at_sign, hosts = authority.rpartition("@")
        for number, host in enumerate(hosts.split(","), start=1):
            if not host.strip():
                raise ValueError(f"{where}host {number} is empty (a stray comma?)")
            url = f"{scheme}://{userinfo}{at_sign}{host.strip()}{tail}"
            try:
                check_address(url)
            except ValueError as exc:
                label = f"host {number}: " if "," in hosts else ""
                raise ValueError(f"{where}{label}{exc}") from None
            urls.append(url)
    shared = {_without_host(url) for url in urls}
    if len(shared) > 1:
        raise ValueError(
            "the nodes differ in more than host and port: give them one user, password, "
            "virtual host and options"
        )
    return urls


def _without_host(url: str) -> tuple[str, str, str, str]:
    parts = urlsplit(url)
    userinfo = parts.netloc.rpartition("@")[0]
    return (parts.scheme, userinfo, parts.path, parts.query)
