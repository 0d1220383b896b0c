"""Acting on every job a filter takes, for operators: how many a filter takes (a bounded
count, for the console's confirm page) and the bulk redrive of failed jobs. The bulk
cancel is jobrail.jobs.cancel's `CancelJobs`."""

from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from jobrail.jobs.domain import JobStatus
from jobrail.jobs.ports import CancelFilter, Cursor
from jobrail.kernel.errors import ConflictError, NotFoundError
from jobrail.kernel.ids import JobId, TenantId
from jobrail.ops.redrive import CleanUp, RedriveJob, RedriveJobCommand

BATCH = 100
"""Failed jobs read per query; each is redriven in a transaction of its own."""
MAX_BATCHES = 5
"""Queries per call: a call redrives at most BATCH * MAX_BATCHES jobs."""


class BulkJobs(Protocol):
    """The jobs a bulk action takes, across every tenant."""

    async def count(self, where: CancelFilter, cap: int, *, cancellable: bool) -> int:
        """How many jobs `where` takes, counting no further than `cap`. With
        `cancellable`, only those a cancel would change (not asked to stop already)."""
        ...

    async def failed(self, where: CancelFilter, limit: int, after: Cursor | None) -> list[Cursor]:
        """Up to `limit` failed jobs `where` takes, oldest first (created_at, then id),
        after `after` in that order."""
        ...


@dataclass(frozen=True, slots=True)
class RedriveJobsCommand:
    tenant_id: TenantId | None = None
    """None: every tenant's jobs."""
    type: str | None = None
    entity_id: str | None = None
    created_before: datetime | None = None

    def filter(self) -> CancelFilter:
        return CancelFilter(
            statuses=frozenset({JobStatus.FAILED}),
            tenant_id=self.tenant_id,
            type=self.type,
            entity_id=self.entity_id,
            created_before=self.created_before,
        )


@dataclass(frozen=True, slots=True)
class RedrivenJobs:
    redriven: int
    skipped: int
    """Jobs found failed that changed before their redrive, or whose unique key a newer
    job holds (`RedriveJob` refused them)."""
    more: bool
    """Failed jobs the filter takes are left: call again to redrive them."""
    dead_letters: CleanUp | None
    """What became of the redriven jobs' dead letters (None: none was redriven)."""


class RedriveJobs:
    """Redrive every failed job a filter takes, as `RedriveJob` redrives one.

    - The filter: tenant, job type, entity, created before a time; none of them means
      every failed job.
    - Jobs are read oldest first, 100 at a time, at most 500 per call; `more` says
      whether the filter still takes failed jobs (call again).
    - Each job is redriven in its own transaction; one that cannot be (it changed, or a
      newer job holds its unique key) is skipped and counted. Their dead letters leave
      the DLQ in one pass after the last redrive.
    """

    def __init__(self, jobs: BulkJobs, redrive: RedriveJob) -> None:
        self._jobs = jobs
        self._redrive = redrive

    async def __call__(self, cmd: RedriveJobsCommand) -> RedrivenJobs:
        where = cmd.filter()
        failures: dict[JobId, datetime] = {}
        skipped, after, more = 0, None, False
        for _ in range(MAX_BATCHES):
            found = await self._jobs.failed(where, BATCH, after)
            for position in found:
                job = RedriveJobCommand(None, position.job_id, clear_dead_letters=False)
                try:
                    failures[position.job_id] = (await self._redrive.redrive(job)).failed_at
                except (NotFoundError, ConflictError):
                    skipped += 1
            if len(found) < BATCH:
                break
            after = found[-1]
        else:
            more = bool(await self._jobs.failed(where, 1, after))
        cleaned = await self._redrive.clear_dead_letters(failures) if failures else None
        return RedrivenJobs(len(failures), skipped, more, cleaned)
