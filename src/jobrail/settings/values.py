"""The values a setting may take, shared by every section: upper bounds on numbers,
lists written comma-separated, and addresses that parse as their clients parse them."""

from typing import Annotated
from urllib.parse import urlsplit

from pydantic import Field

# Upper bounds, so that a value is refused at start-up rather than overflowing where it
# is used (a timedelta, a Postgres integer column): `inf` or 1e300 seconds of ops session,
# 1e23 attempts, were 500s and tracebacks at run time.
MAX_SECONDS = 1e9  # about 31 years
MAX_COUNT = 2**31 - 1  # Postgres's integer
MAX_DAYS = 36_500  # a century

PositiveFloat = Annotated[float, Field(gt=0, le=MAX_SECONDS, allow_inf_nan=False)]
PositiveInt = Annotated[int, Field(gt=0, le=MAX_COUNT)]
Days = Annotated[int, Field(gt=0, le=MAX_DAYS)]


def comma_list(value: object) -> object:
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            import json

            return json.loads(text)
        return [item.strip() for item in text.split(",") if item.strip()]
    return value


def check_address(url: str, *, database: bool = False) -> None:
    """A URL's host and port must parse as its client will parse them, or the client
    fails later with a traceback (a port of 99999 is an OverflowError from the socket).
    A database URL is read by SQLAlchemy, which takes a password up to its last '@' (a
    '/' or '#' in it works unencoded); RabbitMQ's and Redis's clients parse as urlsplit
    does. The message never quotes the URL, which holds the password."""
    try:
        if database:
            from sqlalchemy.engine import make_url

            port = make_url(url).port
        else:
            port = urlsplit(url).port
    except ValueError:
        raise ValueError(
            "its host or port does not parse: the port is a number from 1 to 65535, an "
            "IPv6 address is in [brackets], and a '/', '@' or ':' in the user or password "
            "is percent-encoded"
        ) from None
    if port is not None and not 1 <= port <= 65535:
        raise ValueError(f"its port is {port}: use a port from 1 to 65535")
