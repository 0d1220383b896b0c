"""The jobs this process runs now: the last link of the attempt's chain notes a job once
it is claimed and forgets it when its delivery is done with, however it ends. The
worker's beat (``jobrail.workers_seen``) reports them."""

from jobrail.kernel.ids import JobId
from jobrail.worker.attempt import Attempt, Ending, GiveBack, JobRun, Step


class RunningJobs:
    def __init__(self) -> None:
        self._running: dict[JobId, None] = {}

    def ids(self) -> list[str]:
        """The running jobs' ids, oldest claim first."""
        return [str(job_id) for job_id in self._running]

    def applies_to(self, run: JobRun) -> bool:
        return True

    async def __call__(self, attempt: Attempt, call_next: Step) -> Ending:
        job_id = attempt.delivery.job_id
        noted = False

        async def claimed(_attempt: Attempt) -> GiveBack | None:
            nonlocal noted
            noted = True
            self._running[job_id] = None
            return None

        attempt.on_claimed += (claimed,)
        try:
            return await call_next(attempt)
        finally:
            # Only the delivery that claimed it: another one of the same job, waiting
            # out its lease meanwhile, must not forget it.
            if noted:
                self._running.pop(job_id, None)
