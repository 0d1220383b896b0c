"""Identifiers shared by the platform and the contexts."""

import os
import time
import uuid
from typing import NewType

TenantId = NewType("TenantId", str)
JobId = NewType("JobId", uuid.UUID)


def new_id() -> uuid.UUID:
    """A UUIDv7: time-ordered, so new rows land at the right edge of a B-tree index."""
    millis = time.time_ns() // 1_000_000
    rand = int.from_bytes(os.urandom(10), "big")
    value = (millis & ((1 << 48) - 1)) << 80
    value |= 0x7 << 76
    value |= ((rand >> 62) & 0xFFF) << 64
    value |= 0b10 << 62
    value |= rand & ((1 << 62) - 1)
    return uuid.UUID(int=value)
