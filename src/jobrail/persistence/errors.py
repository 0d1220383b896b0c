import contextlib
from collections.abc import Iterator

from sqlalchemy import exc as sa_exc

from jobrail.jobs.ports import StoreUnavailableError


def is_unavailable(error: BaseException) -> bool:
    """Whether the error says the database cannot be reached (rather than a bad query)."""
    if isinstance(error, sa_exc.DBAPIError):
        if error.connection_invalidated:
            return True
        return isinstance(error, (sa_exc.OperationalError, sa_exc.InterfaceError)) or isinstance(
            error.orig, (OSError, ConnectionError)
        )
    return isinstance(error, (OSError, ConnectionError, TimeoutError, sa_exc.TimeoutError))


@contextlib.contextmanager
def database_errors() -> Iterator[None]:
    """Turn "cannot reach the database" into StoreUnavailableError; let the rest through."""
    try:
        yield
    except Exception as exc:
        if is_unavailable(exc):
            raise StoreUnavailableError(_summary(exc)) from exc
        raise


def _summary(error: BaseException) -> str:
    orig = getattr(error, "orig", None) or error
    return f"{type(orig).__name__}: {str(orig).splitlines()[0] if str(orig) else ''}"
