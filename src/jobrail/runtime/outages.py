"""Which backing service a driver's own error says is away, for the HTTP edge
(``jobrail.http.errors.Outage``): the errors a route meets where no adapter turned them
into StoreUnavailableError, BrokerUnavailableError or LimitsUnavailableError first.
Every way the database can be away is a 503, never a 500 (``jobrail.store.errors``)."""

import aiormq
from aio_pika.exceptions import ChannelInvalidStateError
from redis.exceptions import AskError, ClusterError, RedisClusterException, TryAgainError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from jobrail.store.errors import is_unavailable

# A Redis Cluster failing over or resharding answers CLUSTERDOWN, MASTERDOWN (ClusterError),
# TRYAGAIN, MOVED or ASK (AskError) until its layout settles.
_REDIS_AWAY = (
    RedisConnectionError,
    RedisTimeoutError,
    RedisClusterException,
    ClusterError,
    TryAgainError,
    AskError,
)
_RABBITMQ_AWAY = (
    aiormq.exceptions.AMQPConnectionError,
    aiormq.exceptions.ChannelInvalidStateError,
    ChannelInvalidStateError,
)


def outage(exc: BaseException) -> tuple[str, str] | None:
    """(error code, service) for an error of Redis, RabbitMQ or the database saying it
    cannot be used right now; None for anything else."""
    if isinstance(exc, _REDIS_AWAY):
        return "limits_unavailable", "the limits store"
    if isinstance(exc, _RABBITMQ_AWAY):
        return "broker_unavailable", "the message broker"
    if is_unavailable(exc):
        return "database_unavailable", "the database"
    return None
