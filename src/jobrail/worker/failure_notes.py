"""The link of the attempt's chain that writes a failed attempt's error and traceback
down (``jobrail.worker.failures``) once its outcome is recorded: the runner keeps the
failure on the attempt when the handler raised, this notes it after the record, before
the outcome's messages go."""

from jobrail.worker.attempt import Attempt, Ending, JobRun, Recorded, Step
from jobrail.worker.failures import AttemptFailures, note


class FailureNotes:
    def __init__(self, failures: AttemptFailures) -> None:
        self._failures = failures

    def applies_to(self, run: JobRun) -> bool:
        return True

    async def __call__(self, attempt: Attempt, call_next: Step) -> Ending:
        ending = await call_next(attempt)
        if isinstance(ending, Recorded):
            await note(self._failures, attempt.failure)
        return ending
