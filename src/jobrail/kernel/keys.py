"""Keys made from other values, fitted to what stores them.

A key made from a caller's value (an idempotency key such as ``sync:<account>:<n>``,
an entity id) can be longer than the column it is stored in, although each value it is
made from was within its own limit: Postgres refused it (a 500 for a request the route
had accepted), SQLite stored it whole. ``fitted`` keeps a key that fits as it is, and
makes one that does not into its beginning and the SHA-256 of the whole: as unique as
the key, the same for the same key (a replay still finds its job), and within the limit
on every database.
"""

import hashlib

MAX_KEY_LENGTH = 255
_DIGEST_LENGTH = 64  # hex SHA-256


def fitted(key: str, limit: int = MAX_KEY_LENGTH) -> str:
    """`key`, or for one over `limit` characters its first characters, ``~`` and the
    hex SHA-256 of the whole key, `limit` characters in all."""
    if len(key) <= limit:
        return key
    digest = hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()
    return f"{key[: limit - _DIGEST_LENGTH - 1]}~{digest}"


def fitted_or_none(key: str | None, limit: int = MAX_KEY_LENGTH) -> str | None:
    return None if key is None else fitted(key, limit)
