"""The broker, RabbitMQ: its URL, the exchange, the work queues, the dead-letter queue and
the delay tiers (see jobrail.transport.topology), and how a worker holds deliveries."""

from typing import Annotated, Self

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator
from pydantic_settings import NoDecode

from jobrail.settings.values import PositiveFloat, PositiveInt, check_address, comma_list


class RabbitSettings(BaseModel):
    model_config = ConfigDict(hide_input_in_errors=True)  # the URL holds the password

    url: SecretStr = SecretStr("amqp://guest:guest@127.0.0.1:5672/")
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
        if not url.get_secret_value().startswith(("amqp://", "amqps://")):
            raise ValueError("use an amqp:// or amqps:// URL")
        check_address(url.get_secret_value())
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
