"""A warning said once per interval, however often its cause repeats.

While a backing service is away, every job that needs it meets the same error, many
times a second; one line per interval (with how many it stands for) says as much to an
operator and keeps the log readable.
"""

import logging
import time
from collections.abc import Callable


class ThrottledLog:
    """Logs `warning` at most once per `every_s`; a line after a quiet spell says how
    many were left out since the one before."""

    def __init__(
        self,
        logger: logging.Logger,
        every_s: float = 10.0,
        level: int = logging.WARNING,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._logger = logger
        self._every_s = every_s
        self._level = level
        self._clock = clock
        self._last = float("-inf")
        self._left_out = 0

    def __call__(self, message: str, *args: object) -> bool:
        """Log `message % args` unless one was logged less than `every_s` ago; True if
        it was logged."""
        now = self._clock()
        if now - self._last < self._every_s:
            self._left_out += 1
            return False
        if self._left_out:
            message += " (and %d more like it in the last %.0f s)"
            args = (*args, self._left_out, now - self._last)
        self._last, self._left_out = now, 0
        self._logger.log(self._level, message, *args)
        return True
