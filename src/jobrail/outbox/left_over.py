"""What the fast path leaves to the relay, said at most once every few seconds.

While RabbitMQ is unreachable every enqueue's publish fails and its row waits for the
relay: nothing is lost, and one line per enqueue (1,195 of them in a 24 s outage) buried
the log. The first time is logged at once; what is left after it is added up and logged
as one line per `every_s` while it goes on, with the last reason.
"""

import asyncio
import logging
import time

log = logging.getLogger("jobrail.outbox")


class LeftToRelayLog:
    def __init__(self, every_s: float = 10.0) -> None:
        self._every_s = every_s
        self._count = 0
        self._why: object = None
        self._since = 0.0
        self._timer: asyncio.TimerHandle | None = None

    def note(self, count: int, why: object) -> None:
        """`count` messages were left to the relay, because of `why`."""
        self._count += count
        self._why = why
        if self._timer is None:
            self._since = time.monotonic()
            self._say()

    def _say(self) -> None:
        if not self._count:
            self._timer = None
            return
        took = time.monotonic() - self._since
        if took < 1:
            log.info("fast path left %d messages to the relay: %s", self._count, self._why)
        else:
            log.info(
                "fast path left %d messages to the relay in the last %.0fs: %s",
                self._count,
                took,
                self._why,
            )
        self._count = 0
        self._since = time.monotonic()
        self._timer = asyncio.get_running_loop().call_later(self._every_s, self._say)
