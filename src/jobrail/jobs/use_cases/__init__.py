"""The job use cases, one per module. Each runs the same from a route or a task."""

from jobrail.jobs.use_cases.cancel import CancelJob, CancelJobCommand
from jobrail.jobs.use_cases.dead_letters import (
    DeadLetterOutcome,
    ListDeadLetters,
    PurgeDeadLetters,
    PurgeDeadLettersCommand,
    RedriveDeadLetters,
    RedriveDeadLettersCommand,
)
from jobrail.jobs.use_cases.enqueue import EnqueueJob, EnqueueJobCommand, EnqueueResult
from jobrail.jobs.use_cases.get import GetJob, GetJobQuery
from jobrail.jobs.use_cases.list import ListJobs, ListJobsQuery
from jobrail.jobs.use_cases.redrive import RedriveJob, RedriveJobCommand

__all__ = [
    "CancelJob",
    "CancelJobCommand",
    "DeadLetterOutcome",
    "EnqueueJob",
    "EnqueueJobCommand",
    "EnqueueResult",
    "GetJob",
    "GetJobQuery",
    "ListDeadLetters",
    "ListJobs",
    "ListJobsQuery",
    "PurgeDeadLetters",
    "PurgeDeadLettersCommand",
    "RedriveDeadLetters",
    "RedriveDeadLettersCommand",
    "RedriveJob",
    "RedriveJobCommand",
]
