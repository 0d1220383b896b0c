"""How far a running attempt says it has got (the job's progress), and its checks."""

import math
from dataclasses import dataclass
from datetime import datetime

MAX_PROGRESS_MESSAGE_LENGTH = 200


@dataclass(frozen=True, slots=True)
class JobProgress:
    """How far the running attempt says it has got: `current` of `total` (None: a total
    not known), with a short message. Numbers are finite and not negative, and `current`
    is at most `total` when both are given."""

    current: int | float
    total: int | float | None
    message: str | None
    updated_at: datetime

    def __post_init__(self) -> None:
        check_progress(self.current, self.total, self.message)


def check_progress(current: object, total: object, message: object) -> None:
    """Raise ValueError, naming the problem, unless these make a JobProgress. (Cheap
    enough for a handler that reports in a tight loop.)"""
    _require_amount("current", current)
    if total is not None:
        _require_amount("total", total)
        if current > total:  # type: ignore[operator]
            raise ValueError(f"progress current ({current}) is larger than its total ({total})")
    if message is not None:
        if not isinstance(message, str):
            raise ValueError("progress message must be a string")
        if len(message) > MAX_PROGRESS_MESSAGE_LENGTH:
            raise ValueError(
                f"progress message is longer than {MAX_PROGRESS_MESSAGE_LENGTH} characters"
            )
        if "\x00" in message:
            raise ValueError("progress message holds a NUL character")


def _require_amount(name: str, value: object) -> None:
    # bool is an int to Python, never an amount of work.
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"progress {name} must be a number, not {type(value).__name__}")
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"progress {name} must be finite, not {value}")
    if value < 0:
        raise ValueError(f"progress {name} must not be negative ({value})")
