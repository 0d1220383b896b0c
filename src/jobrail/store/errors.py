"""Telling a database that cannot be used right now from a statement that is wrong.

Both ways to the database, SQLAlchemy (which wraps the driver's error, the driver's
own being its cause) and the asyncpg pool of the job store's hot path, ask one
function, ``is_unavailable``: a process answers 503 (a route) or waits and tries
again (a worker) for an outage, and reports anything else as the bug it is.

An outage is any way Postgres can be away: refusing connections, shutting down
(SQLSTATE 57P01 for a session it ends, 57P03 for one it will not start), starting up
or in recovery (57P03), out of connections or resources (class 53), a connection
broken or reset mid-statement (class 08, or the client's own "connection closed"),
or a connect that timed out. SQLAlchemy's asyncpg dialect wraps several of them in a
plain ``DBAPIError``, not an ``OperationalError``: the server's SQLSTATE decides, not
the class SQLAlchemy picked.
"""

import contextlib
from collections.abc import Iterator

import asyncpg
from sqlalchemy import exc as sa_exc

from jobrail.kernel.errors import StoreUnavailableError

# The driver's errors that mean "the database is away", whatever the statement.
UNAVAILABLE_DRIVER_ERRORS: tuple[type[BaseException], ...] = (
    OSError,  # refused, reset, unreachable (ConnectionError is one)
    TimeoutError,
    asyncpg.PostgresConnectionError,  # class 08
    asyncpg.InterfaceError,  # the connection closed under the client
    asyncpg.InternalClientError,
    asyncpg.exceptions.OperatorInterventionError,  # class 57: shutting down, starting up
    asyncpg.exceptions.InsufficientResourcesError,  # class 53: too many connections
)


def is_unavailable(error: BaseException) -> bool:
    """Whether the error says the database cannot be used right now (see the module),
    rather than that a statement was wrong."""
    for cause in _chain(error):
        if isinstance(cause, sa_exc.DBAPIError) and (
            cause.connection_invalidated
            or isinstance(cause, (sa_exc.OperationalError, sa_exc.InterfaceError))
        ):
            return True
        if isinstance(cause, (*UNAVAILABLE_DRIVER_ERRORS, sa_exc.TimeoutError)):
            return True
    return False


def _chain(error: BaseException) -> Iterator[BaseException]:
    """The error, what SQLAlchemy wrapped (``orig``) and their causes, each once (not
    their contexts: an error raised while another was handled is not that error)."""
    seen: set[int] = set()
    pending: list[BaseException] = [error]
    while pending:
        current = pending.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        for inner in (getattr(current, "orig", None), current.__cause__):
            if isinstance(inner, BaseException):
                pending.append(inner)


@contextlib.contextmanager
def database_errors() -> Iterator[None]:
    """Turn "cannot use the database" into StoreUnavailableError; let the rest through."""
    try:
        yield
    except StoreUnavailableError:
        raise
    except Exception as exc:
        if is_unavailable(exc):
            raise StoreUnavailableError(summary(exc)) from exc
        raise


def summary(error: BaseException) -> str:
    """The driver's error in one line, without the statement or its parameters."""
    orig = getattr(error, "orig", None) or error
    cause = orig.__cause__ if isinstance(orig.__cause__, asyncpg.PostgresError) else orig
    text = str(cause).splitlines()[0] if str(cause) else ""
    return f"{type(cause).__name__}: {text}"
