"""The dead-letter queue for operators: what is in it, running its jobs again, purging it.

Every failed job is published to the DLQ with its reason (like Laravel's failed
jobs), and so is every message the workers could not take (malformed, naming a job
that does not exist or a job of another tenant). A job of a type no worker knew has
failed like any other. Redriving goes by job: the dead letter of a job's current
failure runs it again through `RedriveJob` (fresh attempts, a new message) and leaves
the DLQ; the letter of a failure that has been redriven or followed by another is stale
and leaves the DLQ too ("removed"); anything else stays, with the reason it stayed.
"""

from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from jobrail.jobs.messages import DeadLetter
from jobrail.kernel.errors import ConflictError, InvalidInputError, NotFoundError
from jobrail.kernel.ids import JobId
from jobrail.ops.ports import DeadLetterQueue
from jobrail.ops.redrive import (
    SCAN_LIMIT,
    RedriveJob,
    RedriveJobCommand,
    SupersededFailureError,
)

MAX_BATCH = 1000


class ListDeadLetters:
    def __init__(self, dlq: DeadLetterQueue) -> None:
        self._dlq = dlq

    async def __call__(self, limit: int = 50) -> list[DeadLetter]:
        return await self._dlq.peek_dead_letters(min(limit, MAX_BATCH))


@dataclass(frozen=True, slots=True)
class RedriveDeadLettersCommand:
    ids: frozenset[str] | None = None
    """The dead letters to redrive; None: every one (up to `limit`)."""
    limit: int = MAX_BATCH


@dataclass(frozen=True, slots=True)
class DeadLetterOutcome:
    id: str
    job_id: str | None
    outcome: Literal["redriven", "removed", "kept"]
    detail: str


class RedriveDeadLetters:
    """Run dead-lettered jobs again. The letter of a job's current failure redrives the
    job ("redriven") and leaves the DLQ; the letter of a failure that was redriven or
    followed by another since is stale and leaves it too ("removed"); anything else
    stays ("kept": not a job message, its job does not exist or is not failed)."""

    def __init__(self, dlq: DeadLetterQueue, redrive: RedriveJob) -> None:
        self._dlq = dlq
        self._redrive = redrive

    async def __call__(self, cmd: RedriveDeadLettersCommand) -> list[DeadLetterOutcome]:
        outcomes: list[DeadLetterOutcome] = []
        redriven: dict[JobId, datetime] = {}

        async def decide(letter: DeadLetter) -> bool:
            if cmd.ids is not None and letter.id not in cmd.ids:
                return False
            outcome = await self._one(letter, redriven)
            outcomes.append(outcome)
            return outcome.outcome != "kept"

        await self._dlq.settle_dead_letters(decide, min(cmd.limit, MAX_BATCH))
        if redriven and cmd.ids is not None:
            # A pass over some letters saw only those: the redriven jobs' other stale
            # letters (older failures) go in a pass of their own (none when the DLQ is
            # not safe to scan: the operator's own pass was the only look it gets).
            await self._redrive.clear_dead_letters(redriven)
        return outcomes

    async def _one(self, letter: DeadLetter, redriven: dict[JobId, datetime]) -> DeadLetterOutcome:
        if letter.job_id is None:
            return DeadLetterOutcome(letter.id, None, "kept", "not a job message")
        job_id = str(letter.job_id)
        before = redriven.get(letter.job_id)
        if before is not None and (letter.job_failed_at is None or letter.job_failed_at > before):
            # Its job was redriven earlier in this pass and has failed again since.
            return DeadLetterOutcome(
                letter.id, job_id, "kept", "it failed again after this redrive"
            )
        try:
            done = await self._redrive.redrive(
                RedriveJobCommand(
                    tenant_id=None,
                    job_id=letter.job_id,
                    failed_at=letter.job_failed_at,
                    clear_dead_letters=False,
                )
            )
        except SupersededFailureError as exc:
            return DeadLetterOutcome(letter.id, job_id, "removed", f"stale: {exc}")
        except NotFoundError:
            return DeadLetterOutcome(letter.id, job_id, "kept", "its job does not exist")
        except ConflictError as exc:  # the job is not failed (pending, running, done...)
            return DeadLetterOutcome(letter.id, job_id, "kept", str(exc))
        redriven[done.job.id] = done.failed_at
        return DeadLetterOutcome(letter.id, job_id, "redriven", "pending again")


@dataclass(frozen=True, slots=True)
class PurgeDeadLettersCommand:
    """Every dead letter (`all`), or those matching every filter given."""

    all: bool = False
    job_id: JobId | None = None
    job_type: str | None = None
    reason: str | None = None
    """A part of the reason (reasons carry the error text, so an exact match is rare)."""

    @property
    def filtered(self) -> bool:
        return any(f is not None for f in (self.job_id, self.job_type, self.reason))


@dataclass(frozen=True, slots=True)
class Purged:
    purged: int
    complete: bool
    """False when a filtered purge stopped after SCAN_LIMIT letters: purge again."""


class PurgeDeadLetters:
    """Delete dead letters for good: all of them, or by job, job type or reason. Their
    jobs stay as they are (a failed job stays failed and can still be redriven)."""

    def __init__(self, dlq: DeadLetterQueue) -> None:
        self._dlq = dlq

    async def __call__(self, cmd: PurgeDeadLettersCommand) -> Purged:
        if cmd.all == cmd.filtered:
            raise InvalidInputError("give either all=true or at least one filter")
        if cmd.all:
            return Purged(await self._dlq.purge_dead_letters(), complete=True)
        looked = purged = 0

        async def matches(letter: DeadLetter) -> bool:
            nonlocal looked, purged
            looked += 1
            hit = (
                (cmd.job_id is None or letter.job_id == cmd.job_id)
                and (cmd.job_type is None or letter.job_type == cmd.job_type)
                and (cmd.reason is None or cmd.reason in letter.reason)
            )
            purged += hit
            return hit

        await self._dlq.settle_dead_letters(matches, SCAN_LIMIT)
        return Purged(purged, complete=looked < SCAN_LIMIT)
