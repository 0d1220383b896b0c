"""Each failed attempt's error and traceback, for operators (the console's job page).

The jobs table keeps the last error alone; a failed attempt (one that raised, retried
or not) also leaves its error and its formatted traceback here, the traceback without
locals and cut to MAX_TRACEBACK_CHARS (its start and its end, where the exception is
raised and named, are kept). Formatting happens on a failure only; a succeeding attempt
pays nothing. The note is written once the attempt's outcome is recorded, in a
statement of its own (``jobrail.worker.failure_notes``, a link of the attempt's chain):
a worker that dies in between loses the traceback, never the outcome."""

import logging
import traceback
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from jobrail.jobs.domain import Job
from jobrail.kernel.ids import JobId

log = logging.getLogger("jobrail.runner")

MAX_TRACEBACK_CHARS = 8 * 1024
MAX_ERROR_CHARS = 2000
_CUT = "\n[... {} characters cut ...]\n"


@dataclass(frozen=True, slots=True)
class AttemptFailure:
    job_id: JobId
    attempt: int
    at: datetime
    error: str
    """What the job's last_error said of it."""
    traceback: str


class AttemptFailures(Protocol):
    """Where failed attempts are noted, and read back."""

    async def add(self, failure: AttemptFailure) -> None: ...

    async def of_job(self, job_id: JobId, limit: int) -> list[AttemptFailure]:
        """Up to `limit` of the job's failed attempts, in the order they failed."""
        ...


def formatted(exc: BaseException, limit: int = MAX_TRACEBACK_CHARS) -> str:
    """`exc`'s traceback as Python prints it (no locals), its middle cut past `limit`."""
    text = "".join(traceback.format_exception(exc))
    if len(text) <= limit:
        return text
    keep = limit - len(_CUT.format(len(text)))
    head, tail = keep // 4, keep - keep // 4
    return text[:head] + _CUT.format(len(text) - head - tail) + text[-tail:]


def failure_of(job: Job, error: str, exc: BaseException, at: datetime) -> AttemptFailure:
    """The failure of `job`'s current attempt: `error` as its last_error says, `exc`'s
    traceback."""
    return AttemptFailure(job.id, job.attempts, at, error[:MAX_ERROR_CHARS], formatted(exc))


async def note(failures: AttemptFailures | None, failure: AttemptFailure | None) -> None:
    """Write `failure` down; a note that cannot be written is logged, never raised (the
    outcome is recorded already)."""
    if failures is None or failure is None:
        return
    try:
        await failures.add(failure)
    except Exception as exc:  # noqa: BLE001 - a lost note must not fail the delivery
        log.warning(
            "job %s attempt %d: its traceback was not kept: %s",
            failure.job_id,
            failure.attempt,
            type(exc).__name__,
        )
