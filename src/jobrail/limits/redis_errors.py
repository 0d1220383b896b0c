"""Which errors of a call to Redis say that Redis (or, on a cluster, the node that
serves the call's keys) cannot answer it now.

Everything redis-py raises for a server that is down, loading, failing over or being
resharded is a ``RedisError`` or a ``RedisClusterException`` (ClusterDownError,
MasterDownError, TryAgainError, MovedError and AskError, SlotNotCoveredError, a
connection refused or timed out), or the ``OSError`` of a socket. Besides those, a
connection closed under a command that is still using it (redis-py's cluster client
closes every node's connections on some errors; a node's connections are closed
when it fails) fails that command with an ``AttributeError`` (its writer is gone) or
a ``RuntimeError`` (asyncio: "the handler is closed"). Those two are the driver's, not
a bug of the caller, only when they were raised inside redis-py or asyncio: that is
what `unreachable` checks, so a mistake in jobrail's own code still surfaces.
"""

from types import TracebackType

from redis.exceptions import RedisClusterException, RedisError

_DRIVER_MODULES = ("redis.", "asyncio.", "uvloop")


def _raised_in_driver(traceback: TracebackType | None) -> bool:
    innermost = None
    while traceback is not None:
        innermost = traceback
        traceback = traceback.tb_next
    if innermost is None:
        return False
    module = str(innermost.tb_frame.f_globals.get("__name__", ""))
    return module.startswith(_DRIVER_MODULES)


def unreachable(exc: BaseException) -> bool:
    """Whether `exc`, raised by a call to Redis, means Redis cannot answer it now (the
    limits then treat its keys as unavailable: the job waits and comes back)."""
    if isinstance(exc, RedisError | RedisClusterException | OSError):
        return True
    if isinstance(exc, AttributeError | RuntimeError):
        return _raised_in_driver(exc.__traceback__)
    return False
