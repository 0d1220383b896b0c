"""A waiting job's `waiting` and `paused` as the API shows them (jobrail.jobs.standing):
on ``GET /jobs/{id}``, in the `waiting` frames of its event stream, and, as its limits
noted it (no place, no estimate), in lists and in `deferred` events."""

import uuid
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field, model_validator

from jobrail.jobs.domain import Wait
from jobrail.jobs.ports import LINE_CAP, Pause
from jobrail.jobs.standing import Standing

WaitReason = Literal[
    "paused",
    "debounce",
    "run_at",
    "retry",
    "priority",
    "fair_share",
    "rate_limit",
    "concurrency",
    "lock",
    "limits_store",
    "limit",
]


class WaitsOnOut(BaseModel):
    kind: str = Field(
        description="rate_limit, concurrency or lock; limits_store while Redis is away."
    )
    name: str = Field(description="The limit's name in its job type (`lock` for the lock).")
    key: str = Field(description="Its key for this job.")
    held_by_job_id: uuid.UUID | None = Field(
        default=None,
        description="A lock: the id of the job that held it when this job was turned "
        "away, if it is one of the tenant's jobs (on `GET /jobs/{id}` and its stream's "
        "`waiting` frames; null in lists and events).",
    )


class WaitingOut(BaseModel):
    reason: WaitReason = Field(
        description="Why it waits, the first that applies: `paused` (its queue, type or "
        "tenant; see `paused`), `debounce` (its debounce window is open until `until`), "
        "`run_at` (due at `until`), `retry` (its next attempt is due at `until`), "
        "`priority` (held in its tenant's line under fair dispatch, with jobs of a higher "
        "priority ahead of it there), `fair_share` (held in its tenant's line, taking "
        "turns with the other tenants), or what turned it away at its last try "
        "(`rate_limit`, `concurrency`, `lock`, `limits_store`: the limits could not be "
        "asked; `limit`: a kind of the app's own), listed in `on`."
    )
    since: datetime = Field(description="Since when it has been waiting for that.")
    until: datetime | None = Field(
        default=None,
        description="When it is due or tries again; null when that depends on the others "
        "(in line, paused).",
    )
    on: list[WaitsOnOut] = Field(
        default_factory=list, description="What turned the job away at its last try."
    )
    position: int | None = Field(
        default=None,
        description="Held in its tenant's line (fair dispatch): its place there, 1 being "
        "the next of the tenant's jobs to start. null when it is not in a line (with "
        "fair dispatch off, always), in lists and in events.",
    )
    ahead_in_tenant: int | None = Field(
        default=None,
        description="Held: how many of its tenant's jobs of its queue are ahead of it "
        f"(`position` - 1), counted up to {LINE_CAP}.",
    )
    ahead_capped: bool = Field(
        default=False,
        description=f"More than {LINE_CAP} are ahead of it: the counts are a lower bound.",
    )
    higher_priority_ahead: int | None = Field(
        default=None, description="Held: of those ahead of it, the jobs of a higher priority."
    )
    ahead_in_queue: int | None = Field(
        default=None,
        description="Held: about how many jobs of all tenants start before it, from its "
        "tenant's share of the queue (`ahead_in_tenant` * the weights of the tenants with "
        "jobs waiting / its tenant's weight); null until the dispatcher has measured the "
        "queue, and while it is paused.",
    )
    eta: datetime | None = Field(
        default=None,
        description="Held: an estimate of when it starts, `ahead_in_queue` at the rate the "
        "queue's workers took jobs lately (never before `until`); null without that rate "
        "(not measured yet, or none), while it is paused, or more than a year off. It moves "
        "as the line does: read again, or follow the job's events.",
    )

    @model_validator(mode="before")
    @classmethod
    def _noted(cls, data: Any) -> Any:
        """A note of the limits (``Wait.as_json``, as events carry it) names its reason
        by what turned it away."""
        if isinstance(data, dict) and "reason" not in data:
            on = data.get("on") or [{"kind": "limit"}]
            return {**data, "reason": on[0]["kind"]}
        return data

    @classmethod
    def of(cls, standing: Standing) -> "WaitingOut":
        return cls(
            reason=standing.reason,
            since=standing.since,
            until=standing.until,
            on=[
                WaitsOnOut(
                    kind=w.kind,
                    name=w.name,
                    key=w.key,
                    held_by_job_id=uuid.UUID(w.held_by) if w.held_by else None,
                )
                for w in standing.on
            ],
            position=standing.position,
            ahead_in_tenant=standing.ahead_in_tenant,
            ahead_capped=standing.ahead_capped,
            higher_priority_ahead=standing.higher_priority_ahead,
            ahead_in_queue=standing.ahead_in_queue,
            eta=standing.eta,
        )

    @classmethod
    def noted(cls, wait: Wait | None) -> "WaitingOut | None":
        """What the limits noted, alone (a job in a list): the lock's holder unnamed."""
        if wait is None:
            return None
        on = [{"kind": w.kind, "name": w.name, "key": w.key} for w in wait.on]
        return cls.model_validate({"on": on, "until": wait.until, "since": wait.since})


class PausedByOut(BaseModel):
    scope: str = Field(description="queue, type or tenant")
    value: str = Field(description="Its name.")
    since: datetime = Field(description="When it was paused.")

    @classmethod
    def of(cls, pause: Pause | None) -> "PausedByOut | None":
        return (
            None
            if pause is None
            else cls(scope=pause.scope, value=pause.value, since=pause.paused_at)
        )
