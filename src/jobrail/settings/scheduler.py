"""``jobrail scheduler``: its leader lock and catching up, overrides of declared schedules,
and the housekeeping it schedules (how long jobs, outbox and inbox rows are kept)."""

from typing import Annotated, Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

from jobrail.settings.values import MAX_SECONDS, Days, PositiveFloat


class ScheduleOverride(BaseModel):
    """Change a declared schedule without a release: another cron, or switch it off."""

    # A misspelt key ("crom") was ignored, and the schedule kept its cron without a word.
    model_config = ConfigDict(extra="forbid")

    cron: str | None = None
    enabled: bool = True


class SchedulerSettings(BaseModel):
    """``jobrail scheduler`` and the housekeeping it schedules (see jobrail.scheduler)."""

    embedded: bool = Field(
        default=True,
        description="The embedded mode (`jobrail run`) fires the schedules in its own process "
        "(its leader lock on the in-memory limits backend).",
    )

    tick_s: PositiveFloat = Field(
        default=1.0,
        description="How often a standby scheduler tries to take the lead, and the longest "
        "the leader sleeps between two looks at the clock.",
    )
    leader_ttl_s: Annotated[float, Field(ge=1, le=MAX_SECONDS, allow_inf_nan=False)] = Field(
        default=15.0,
        description="Life of the leader's lock in Redis, renewed every quarter of it: a dead "
        "leader is replaced within leader_ttl_s + tick_s.",
    )
    catch_up_s: PositiveFloat = Field(
        default=300.0,
        description="A period missed (failover, restart, outage) is still fired while it "
        "started less than this ago; older ones are skipped with a warning.",
    )
    schedules: dict[str, ScheduleOverride] = Field(
        default_factory=dict,
        description="Overrides by schedule name (JSON), e.g. "
        '{"prune-jobs": {"cron": "0 4 * * *"}, "dlq-report": {"enabled": false}}.',
    )
    prune_after_days: Days = Field(
        default=30,
        description="prune-jobs deletes finished jobs older than this, then the batches "
        "and chains that finished as long ago and have no job left.",
    )
    outbox_keep_days: Days = Field(
        default=7,
        description="prune-messages deletes outbox rows published longer ago than this "
        "(rows not yet published stay, however old).",
    )
    inbox_keep_days: Days = Field(
        default=45,
        description="prune-messages deletes inbox rows whose message was last taken longer "
        "ago than this; more than prune_after_days (see _inbox_outlives_jobs).",
    )
    outbox_lag_warn_s: PositiveFloat = Field(
        default=60.0,
        description="outbox-lag warns when the oldest unpublished outbox row is older.",
    )

    @model_validator(mode="after")
    def _inbox_outlives_jobs(self) -> Self:
        # An inbox row is what stops a consumer from taking its message twice, and the
        # message can come again as long as the job that carries it exists: a failed job
        # can be redriven until prune-jobs deletes it, prune_after_days after it finished.
        # Each time the job runs it takes the message again and that renews the row's
        # time (jobrail.outbox.inbox), so a row kept longer than finished jobs are
        # outlives every job that could bring its message back.
        if self.inbox_keep_days <= self.prune_after_days:
            raise ValueError(
                "inbox_keep_days must be more than prune_after_days: a failed job can be "
                "redriven until it is pruned, and its message must still be known then"
            )
        return self

    @model_validator(mode="after")
    def _failover_is_caught_up(self) -> Self:
        if self.catch_up_s < self.leader_ttl_s + self.tick_s:
            raise ValueError(
                "catch_up_s must be at least leader_ttl_s + tick_s, or the periods missed "
                "during a failover would be skipped"
            )
        return self
