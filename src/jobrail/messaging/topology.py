"""Queue topology: work queues, the dead-letter queue and the delay tiers.

Delays use a fixed set of queues, one per delay tier, each with a queue-wide TTL
and dead-lettering back to the work exchange. A message for queue Q delayed by d
goes to the largest tier not longer than d (or the shortest tier), keeping Q as
its routing key; when it expires RabbitMQ routes it back to Q. If it arrives
early (d was between tiers) the worker sends it round again for the rest. With
one queue per TTL, a short delay never waits behind a long one.
"""

from collections.abc import Sequence
from dataclasses import dataclass

from jobrail.settings import RabbitSettings

# Headers exchanges ignore headers that start with "x-" when matching bindings.
DELAY_HEADER = "jobrail-delay-tier"


def pick_tier(delay_ms: float, tiers_ms: Sequence[int]) -> int | None:
    """The delay tier for a message due in `delay_ms`; None when it is due now."""
    if delay_ms <= 0:
        return None
    fitting = [tier for tier in tiers_ms if tier <= delay_ms]
    return max(fitting) if fitting else min(tiers_ms)


def tier_label(tier_ms: int) -> str:
    return f"{tier_ms}ms"


@dataclass(frozen=True, slots=True)
class Topology:
    """Physical names (with the configured prefix) of everything the platform declares."""

    exchange: str
    delay_exchange: str
    queues: dict[str, str]
    dead_letter_logical: str
    dead_letter_queue: str
    delay_queues: dict[int, str]

    @classmethod
    def from_settings(cls, settings: RabbitSettings) -> "Topology":
        return cls(
            exchange=settings.name(settings.exchange),
            delay_exchange=settings.name(f"{settings.exchange}.delay"),
            queues={queue: settings.name(queue) for queue in settings.queues},
            dead_letter_logical=settings.dead_letter_queue,
            dead_letter_queue=settings.name(settings.dead_letter_queue),
            delay_queues={
                tier: settings.name(f"jobs.delay.{tier_label(tier)}")
                for tier in settings.delay_tiers_ms
            },
        )

    def physical(self, queue: str) -> str:
        """Physical name of a logical queue (a work queue or the dead-letter queue)."""
        if queue == self.dead_letter_logical:
            return self.dead_letter_queue
        try:
            return self.queues[queue]
        except KeyError:
            raise ValueError(f"unknown queue {queue!r}") from None

    def logical(self, physical: str) -> str | None:
        for logical, name in self.queues.items():
            if name == physical:
                return logical
        return None
