"""Fair dispatch: whether jobs wait in the database for a dispatcher that releases them
into the broker in fair order, and how it does (see ``jobrail.dispatch``)."""

from typing import Annotated, Literal

from pydantic import BaseModel, Field, field_validator
from pydantic_settings import NoDecode

from jobrail.settings.values import PositiveFloat, comma_list


class DispatchSettings(BaseModel):
    enabled: bool = Field(
        default=False,
        description=(
            "Hold the jobs an enqueue makes due now in the database, and release them into "
            "the broker in fair order between tenants, a few at a time (`ready_target`). "
            "Off: every job's message is published at its enqueue, first in first out."
        ),
    )
    ready_target: int = Field(
        default=64,
        ge=1,
        le=10_000,
        description=(
            "At most this many released messages wait ready in a queue (not yet taken by "
            "a worker): the dispatcher releases more only as workers take them. Lower is "
            "fairer to a tenant that arrives late; too low leaves workers waiting."
        ),
    )
    interval_s: PositiveFloat = Field(
        default=0.02,
        le=5,
        description="How long the dispatcher waits after a pass that released nothing.",
    )
    quiet_interval_s: PositiveFloat = Field(
        default=1.0,
        le=60,
        description=(
            "The longest the dispatcher goes without a pass over a queue that has had "
            "nothing to do (nothing held, no fast-path credit taken); meanwhile one read "
            "for all such queues, every 0.1 s, looks for what would give them work. "
            "Capped at a third of lease_s, so that the queue's lease is renewed."
        ),
    )
    lease_s: PositiveFloat = Field(
        default=3.0,
        le=60,
        description=(
            "How long a dispatcher keeps a queue after its last pass: one dispatcher "
            "releases a queue's jobs at a time, another takes over this long after it stops."
        ),
    )
    priority_offsets_s: dict[str, float] = Field(
        default={"low": 0.0, "normal": 30.0, "high": 120.0, "urgent": 600.0},
        description=(
            "Each priority's head start, in seconds: a held job is placed in its tenant's "
            "line as if it had been due this much earlier, so a higher priority goes ahead "
            "of lower ones due less than the difference before it, and no further."
        ),
    )
    run_in: Annotated[list[Literal["worker", "scheduler"]], NoDecode] = Field(
        default=["worker"],
        min_length=1,
        description=(
            "Which processes run a dispatcher: `worker` (each worker process; one at a "
            "time releases a queue, the others stand by) and/or `scheduler` (each "
            "`jobrail scheduler` process), comma-separated. `scheduler` alone keeps the "
            "release's cost off the workers; a scheduler must then run, or held jobs "
            "wait. The embedded mode's one process always runs one."
        ),
    )
    rediscover_s: PositiveFloat = Field(
        default=5.0,
        le=3600,
        description=(
            "How often the dispatcher reads again which tenants have held jobs (it learns "
            "of new ones from their enqueues; this catches any whose notice it missed)."
        ),
    )

    _split_run_in = field_validator("run_in", mode="before")(comma_list)

    @field_validator("priority_offsets_s")
    @classmethod
    def _every_priority(cls, offsets: dict[str, float]) -> dict[str, float]:
        levels = ("low", "normal", "high", "urgent")
        missing = [level for level in levels if level not in offsets]
        unknown = [name for name in offsets if name not in levels]
        if missing or unknown:
            raise ValueError(f"give the offsets of {', '.join(levels)}, and no other")
        values = [offsets[level] for level in levels]
        if any(not 0 <= v <= 86_400 for v in values) or values != sorted(values):
            raise ValueError("offsets are 0 to 86400 seconds, growing from low to urgent")
        return offsets
