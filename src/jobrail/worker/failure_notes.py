"""The link of the attempt's chain that writes a failed attempt's error and traceback
down (``jobrail.worker.failures``) once its outcome is recorded: the runner keeps the
failure on the attempt when the handler raised, this notes it after the record.

The note is written beside the rest of the attempt's end, not before it: the outcome's
messages (its retry, its dead letter) and the releases of its lock and slots do not wait
for it. `close` waits for the notes still being written (at shutdown, before the
store's connections close)."""

import asyncio

from jobrail.worker.attempt import Attempt, Ending, JobRun, Recorded, Step
from jobrail.worker.failures import AttemptFailures, note


class FailureNotes:
    def __init__(self, failures: AttemptFailures) -> None:
        self._failures = failures
        self._writing: set[asyncio.Task[None]] = set()

    def applies_to(self, run: JobRun) -> bool:
        return True

    async def __call__(self, attempt: Attempt, call_next: Step) -> Ending:
        ending = await call_next(attempt)
        if isinstance(ending, Recorded) and attempt.failure is not None:
            task = asyncio.create_task(note(self._failures, attempt.failure), name="failure-note")
            self._writing.add(task)
            task.add_done_callback(self._writing.discard)
        return ending

    async def close(self) -> None:
        """Wait for the notes still being written (`note` never raises)."""
        if self._writing:
            await asyncio.wait(set(self._writing))
