"""Ports of what operators read, platform-wide (every tenant at once): the jobs by type and
status, the recent failures and flows, the outbox's lag, and the broker's queue depths.
They stay below ops: the maintenance jobs and the metrics read them too. Adapters live
in ops/ and transport/.
"""

from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from jobrail.jobs.domain import Job, JobStatus
from jobrail.jobs.flow import Flow


@dataclass(frozen=True, slots=True)
class QueueDepth:
    queue: str
    """The logical name (``jobs.default``, ``jobs.dlq``)."""
    ready: int
    consumers: int


class QueueStats(Protocol):
    async def queue_depths(self) -> list[QueueDepth]:
        """Messages ready and consumers of every work queue and of the dead-letter
        queue; raises BrokerUnavailableError when the broker cannot be asked."""
        ...


@dataclass(frozen=True, slots=True)
class JobCount:
    type: str
    status: JobStatus
    count: int


class OpsReadModel(Protocol):
    """Platform-wide reads for operators (every tenant at once)."""

    async def job_counts(self) -> list[JobCount]:
        """The jobs not ended yet (pending, running, retrying, blocked), by type and
        status."""
        ...

    async def recent_failures(self, limit: int) -> list[Job]:
        """Failed jobs, the most recently finished first."""
        ...

    async def oldest_unpublished(self) -> datetime | None:
        """When the oldest outbox row still waiting to be published was written."""
        ...

    async def recent_flows(self, limit: int) -> list[tuple[Flow, dict[JobStatus, int]]]:
        """Batches and chains, the most recently created first, each with its members by
        status (as FlowRepository.counts has them)."""
        ...
