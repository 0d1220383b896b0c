"""A periodic job, declared as data by a module, and the identity of each of its runs.

Each fire time of a schedule starts a period; the job enqueued for it carries the
idempotency key ``<name>:<period start in UTC>`` (``prune-jobs:2026-11-30T03:00:00Z``)
under the reserved tenant ``_system``. However many schedulers fire a period, and
however often, the jobs table holds one job for it: the key is unique per tenant.
"""

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from jobrail.kernel.ids import TenantId
from jobrail.scheduler.cron import Cron

SYSTEM_TENANT = TenantId("_system")
"""The tenant of scheduled platform jobs. Tenant names start with a letter or a digit
(jobrail.tenants), so no tenant can be made with this id, read its jobs or forge them."""

SCHEDULE_NAME = re.compile(r"^[a-z][a-z0-9-]{0,62}[a-z0-9]$")


@dataclass(frozen=True, slots=True)
class Schedule:
    """Enqueue a job of `job_type` with `payload` at every fire time of `cron`.

    The name is the schedule's identity in period keys and settings overrides:
    renaming a schedule makes its current period fire once more."""

    name: str
    cron: str
    job_type: str
    payload: Mapping[str, Any] = field(default_factory=dict)
    timezone: str = "UTC"
    catch_up: bool = True
    """False: a leader that finds several periods due (after a start, a takeover or an
    outage) fires the latest alone, for a job that looks at the present (a sampler, a
    lag check), which one run brings up to date."""

    def __post_init__(self) -> None:
        if not SCHEDULE_NAME.match(self.name):
            raise ValueError(
                f"schedule name {self.name!r}: lower-case letters, digits and '-', "
                "starting with a letter"
            )
        try:
            Cron(self.cron, self.timezone)
        except ValueError as exc:
            raise ValueError(f"schedule {self.name}: {exc}") from None

    @property
    def timing(self) -> Cron:
        return Cron(self.cron, self.timezone)

    def periods(self, after: datetime, until: datetime) -> Iterator[datetime]:
        """The start of every period that began in (`after`, `until`], oldest first."""
        return self.timing.fires(after, until)

    def period_key(self, start: datetime) -> str:
        return f"{self.name}:{start.astimezone(UTC).strftime('%Y-%m-%dT%H:%M:%SZ')}"
