"""Which errors say the database is away (a 503, a wait) and which say a statement was
wrong (a bug): by the server's SQLSTATE or the client's connection error, however
SQLAlchemy wrapped it. SQLAlchemy's asyncpg dialect wraps "shutting down" in a plain
DBAPIError, which once went out as a 500."""

import asyncpg
import pytest
from sqlalchemy import exc as sa_exc

from jobrail.kernel.errors import StoreUnavailableError
from jobrail.store.errors import database_errors, is_unavailable, summary


def as_sqlalchemy_raises(driver_error: Exception, kind: type[sa_exc.DBAPIError]) -> Exception:
    """`driver_error` as SQLAlchemy's asyncpg dialect hands it on: its own adapted error
    made from it (the driver's its cause), inside a DBAPIError with the statement."""
    adapted = Exception(str(driver_error))
    adapted.__cause__ = driver_error
    return kind("INSERT INTO jobs VALUES ($1)", ("tenant-secret",), adapted)


AWAY = [
    asyncpg.CannotConnectNowError("the database system is shutting down"),  # 57P03
    asyncpg.CannotConnectNowError("the database system is starting up"),  # 57P03
    asyncpg.CannotConnectNowError("the database system is in recovery mode"),  # 57P03
    asyncpg.AdminShutdownError("terminating connection due to administrator command"),
    asyncpg.exceptions.CrashShutdownError("crash shutdown"),  # 57P02
    asyncpg.TooManyConnectionsError("sorry, too many clients already"),  # 53300
    asyncpg.ConnectionDoesNotExistError("connection was closed in the middle of operation"),
    asyncpg.exceptions.ConnectionFailureError("connection failure"),  # 08006
    ConnectionResetError(104, "Connection reset by peer"),
    ConnectionRefusedError(111, "Connect call failed"),
    TimeoutError(),
]
WRONG = [
    asyncpg.UniqueViolationError("duplicate key value violates unique constraint"),
    asyncpg.StringDataRightTruncationError("value too long for type character varying(255)"),
    asyncpg.UndefinedTableError('relation "jobs" does not exist'),
    asyncpg.InvalidTextRepresentationError("invalid input syntax for type uuid"),
]


@pytest.mark.parametrize("error", AWAY, ids=lambda e: f"{type(e).__name__}:{e}")
@pytest.mark.parametrize("kind", [sa_exc.DBAPIError, sa_exc.InternalError])
def test_the_database_away_is_unavailable_however_wrapped(
    error: Exception, kind: type[sa_exc.DBAPIError]
) -> None:
    assert is_unavailable(error)
    wrapped = as_sqlalchemy_raises(error, kind)
    assert is_unavailable(wrapped)
    with pytest.raises(StoreUnavailableError) as raised, database_errors():
        raise wrapped
    assert "tenant-secret" not in str(raised.value)
    assert "INSERT" not in str(raised.value)


@pytest.mark.parametrize("error", WRONG, ids=lambda e: type(e).__name__)
def test_a_wrong_statement_is_not_an_outage(error: Exception) -> None:
    assert not is_unavailable(error)
    wrapped = as_sqlalchemy_raises(error, sa_exc.DBAPIError)
    assert not is_unavailable(wrapped)
    with pytest.raises(sa_exc.DBAPIError), database_errors():
        raise wrapped


def test_the_summary_is_the_servers_message_alone() -> None:
    error = as_sqlalchemy_raises(
        asyncpg.CannotConnectNowError("the database system is shutting down"), sa_exc.DBAPIError
    )
    assert summary(error) == "CannotConnectNowError: the database system is shutting down"
