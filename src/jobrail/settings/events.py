"""The job event feed and its webhooks: how often new events are looked for, how long
they are kept, and where webhooks may be delivered (see jobrail.events, jobrail.webhooks)."""

from typing import Annotated

from pydantic import BaseModel, Field

from jobrail.settings.values import MAX_DAYS, PositiveFloat, PositiveInt


class EventsSettings(BaseModel):
    """The job event feed (GET /events, GET /jobs/{id}/events) and its webhooks."""

    poll_interval_ms: PositiveInt = Field(
        default=500,
        description="How often the API (one query for all its open event streams) and "
        "the webhook relay look for new events.",
    )
    max_streams_per_tenant: PositiveInt = Field(
        default=20,
        description="Event streams one tenant may hold open on one API process; one more is a 429.",
    )
    keep_days: Annotated[float, Field(gt=0, le=MAX_DAYS, allow_inf_nan=False)] = Field(
        default=7.0,
        description="Events are deleted this long after they happened "
        "(maintenance.prune_messages).",
    )
    webhook_timeout_s: PositiveFloat = Field(
        default=10.0, description="How long a webhook receiver has to answer."
    )
    webhook_private_addresses: bool = Field(
        default=False,
        description="Allow webhook URLs on loopback, private, link-local and other "
        "special-purpose addresses (development and tests: a receiver on the same "
        "machine); the API's own address stays refused. Off, such URLs are refused, and "
        "a name that resolves to one is not delivered to.",
    )
