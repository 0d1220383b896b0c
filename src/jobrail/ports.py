"""Public: the ports a module's use cases depend on, and the values they pass.

A bounded context's application layer imports these (``from jobrail.ports import
JobQueue``) and its adapters or tests implement or fake them. Everything here is
plain Python: no framework comes with it. The names are re-exported from where
jobrail implements them, which may move; this module is what stays.

- ``JobQueue``: record a job in the current transaction (``EnqueueJobCommand`` in,
  ``EnqueueResult`` out, with the ``Job`` aggregate it created or found). The command's
  ``run_after`` puts the job off, ``deadline`` is when it must have started by and
  ``unique_key`` keeps one unfinished job of its type per key and tenant.
- ``EventPublisher``: record an integration event for its consumers, in the current
  transaction; ``Inbox``: dedupe a consumed message.
- ``LimitsBackend`` and its requests (``Acquire`` with a key from ``KeyTemplate``) and
  answers (``Admission``, ``Grant``, ``Decision``), for a use case that waits on a rate
  limit itself; ``LimitsUnavailableError`` when the store cannot be reached.
- ``BatchCommand`` and ``ChainCommand`` of ``FlowJob``s: a batch or a chain to start in
  the current transaction (``uow.workflows.batch`` / ``.chain`` of a
  ``SqlaUnitOfWork``); ``FlowStarted`` out, with its jobs and callbacks.
"""

from jobrail.jobs.domain import Job, JobStatus
from jobrail.jobs.intake import EnqueueJobCommand, EnqueueResult, JobQueue
from jobrail.jobs.ports import EventPublisher, Inbox
from jobrail.jobs.workflows import BatchCommand, ChainCommand, FlowJob, FlowStarted
from jobrail.limits.model import (
    Acquire,
    Admission,
    Decision,
    Grant,
    KeyTemplate,
    LimitsBackend,
    LimitsUnavailableError,
)

__all__ = [
    "Acquire",
    "Admission",
    "BatchCommand",
    "ChainCommand",
    "Decision",
    "EnqueueJobCommand",
    "EnqueueResult",
    "EventPublisher",
    "FlowJob",
    "FlowStarted",
    "Grant",
    "Inbox",
    "Job",
    "JobQueue",
    "JobStatus",
    "KeyTemplate",
    "LimitsBackend",
    "LimitsUnavailableError",
]
