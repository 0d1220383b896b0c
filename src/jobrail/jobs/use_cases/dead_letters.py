"""The dead-letter queue for operators: what is in it, and running its jobs again.

Every failed job is published to the DLQ with its reason (like Laravel's failed
jobs), and so is every message the workers could not take (malformed, naming a job
that does not exist or a job of another tenant). A job of a type no worker knew has
failed like any other. Redriving goes by job: a dead letter whose job failed is run
again through `RedriveJob` (fresh attempts, a new message) and leaves the DLQ;
anything else stays, with the reason it stayed.
"""

from dataclasses import dataclass
from typing import Literal

from jobrail.jobs.ports import DeadLetterQueue
from jobrail.jobs.use_cases.redrive import RedriveJob, RedriveJobCommand
from jobrail.kernel.errors import ConflictError, NotFoundError
from jobrail.messaging.envelope import DeadLetter

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
    outcome: Literal["redriven", "kept"]
    detail: str


class RedriveDeadLetters:
    def __init__(self, dlq: DeadLetterQueue, redrive: RedriveJob) -> None:
        self._dlq = dlq
        self._redrive = redrive

    async def __call__(self, cmd: RedriveDeadLettersCommand) -> list[DeadLetterOutcome]:
        outcomes: list[DeadLetterOutcome] = []

        async def decide(letter: DeadLetter) -> bool:
            if cmd.ids is not None and letter.id not in cmd.ids:
                return False
            outcome = await self._one(letter)
            outcomes.append(outcome)
            return outcome.outcome == "redriven"

        await self._dlq.settle_dead_letters(decide, min(cmd.limit, MAX_BATCH))
        return outcomes

    async def _one(self, letter: DeadLetter) -> DeadLetterOutcome:
        if letter.job_id is None:
            return DeadLetterOutcome(letter.id, None, "kept", "not a job message")
        job_id = str(letter.job_id)
        try:
            await self._redrive(RedriveJobCommand(tenant_id=None, job_id=letter.job_id))
        except NotFoundError:
            return DeadLetterOutcome(letter.id, job_id, "kept", "its job does not exist")
        except ConflictError as exc:  # the job is not failed (pending, running, done...)
            return DeadLetterOutcome(letter.id, job_id, "kept", str(exc))
        return DeadLetterOutcome(letter.id, job_id, "redriven", "pending again")
