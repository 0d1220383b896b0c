"""Identifiers shared by the platform and the contexts."""

import os
import threading
import time
import uuid
from typing import NewType

TenantId = NewType("TenantId", str)
JobId = NewType("JobId", uuid.UUID)


class _RandomBytes:
    """The operating system's random bytes (``os.urandom``), read a page at a time.

    An enqueue makes four random values (the job's id, its message's, the request's id
    and its holder in the rate limits); a system call for each was a measurable part of
    the API's time per request (bench/README.md). The bytes are the same as
    ``os.urandom``'s; only the reads are fewer. A forked child must not hand out the
    bytes its parent will also hand out, so it drops what it inherited (the
    ``register_at_fork`` hook below; ``random`` and ``secrets`` are no help here:
    ``random`` is not unpredictable, and ``secrets`` reads per call)."""

    _PAGE = 4096

    def __init__(self) -> None:
        self._buffer = b""
        self._at = 0
        # jobrail makes ids on its event loop, but an application's code may make them
        # in threads too (jobrail is a library): two threads must never get the same bytes.
        self._lock = threading.Lock()

    def take(self, n: int) -> bytes:
        with self._lock:
            at = self._at
            if at + n > len(self._buffer):
                self._buffer = os.urandom(max(self._PAGE, n))
                at = 0
            self._at = at + n
            return self._buffer[at : at + n]

    def forget(self) -> None:
        # In a forked child: a lock another thread held at the fork stays held there.
        self._lock = threading.Lock()
        self._buffer = b""
        self._at = 0


_random = _RandomBytes()
os.register_at_fork(after_in_child=_random.forget)


def random_bytes(n: int) -> bytes:
    """`n` bytes from the operating system's random source (as ``os.urandom``)."""
    return _random.take(n)


def random_hex(n: int) -> str:
    """`n` random bytes as hex (as ``secrets.token_hex``)."""
    return _random.take(n).hex()


def new_id() -> uuid.UUID:
    """A UUIDv7: time-ordered, so new rows land at the right edge of a B-tree index."""
    millis = time.time_ns() // 1_000_000
    rand = int.from_bytes(_random.take(10), "big")
    value = (millis & ((1 << 48) - 1)) << 80
    value |= 0x7 << 76
    value |= ((rand >> 62) & 0xFFF) << 64
    value |= 0b10 << 62
    value |= rand & ((1 << 62) - 1)
    return uuid.UUID(int=value)
