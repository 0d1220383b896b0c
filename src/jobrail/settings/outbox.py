"""The outbox: when its relay publishes what the publishing request's fast path did not
(see jobrail.outbox)."""

from typing import Annotated

from pydantic import BaseModel, Field

from jobrail.settings.values import MAX_SECONDS, PositiveFloat, PositiveInt


class OutboxSettings(BaseModel):
    relay_interval_s: PositiveFloat = 1.0
    relay_batch: PositiveInt = 200
    relay_min_age_s: Annotated[float, Field(ge=0, le=MAX_SECONDS, allow_inf_nan=False)] = Field(
        default=2.0,
        description="Rows younger than this are left to the publishing request's fast path.",
    )
    fast_path_timeout_s: PositiveFloat = 2.0

    @property
    def mark_delay_s(self) -> float:
        """How long a published row's mark waits for the next enqueue statement to carry
        it before going in a statement of its own: a quarter of `relay_min_age_s` (so
        the relay never takes a row whose mark is merely waiting), at most 0.25 s."""
        return min(0.25, self.relay_min_age_s / 4)
