from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from datetime import datetime, timedelta

from opentelemetry import propagate, trace
from opentelemetry.trace import SpanKind

from jobrail.jobs.domain import Job
from jobrail.jobs.intake import (
    EnqueueJobCommand,
    EnqueueResult,
    EnqueueUnitOfWork,
    JobCatalog,
    JobType,
)
from jobrail.jobs.messages import JobMessage
from jobrail.jobs.priority import LineRules
from jobrail.kernel.clock import Clock
from jobrail.kernel.errors import ConflictError, InvalidInputError
from jobrail.kernel.ids import JobId, new_id

_tracer = trace.get_tracer("jobrail.jobs")


__all__ = [
    "EnqueueJob",
    "EnqueueJobCommand",
    "EnqueueOpenJob",
    "EnqueueResult",
    "holdable",
    "message_for",
]


class EnqueueJob:
    """Record a job and its message in one transaction; the message leaves after commit.

    - The job type must be registered and the payload must fit its schema.
    - The same tenant and Idempotency-Key return the job made the first time and
      publish nothing new; the key reused for a different type or payload is a conflict.
    - A unique key: while a job of the tenant and type with that key is pending,
      retrying or running, the enqueue returns it (created False), whatever its
      payload; once it has ended, a new job is made.
    - A debounce key: see `Debounce`; the enqueue that collapses returns the pending
      job (created False) with the new payload.
    - A deadline: no attempt starts at or after it; a job still waiting then ends
      expired (it must be after the job is due).
    - Every job belongs to the tenant that asked for it.
    - The job keeps the trace context of its enqueue: its messages carry it, and the
      worker's spans join the caller's trace.

    Called on its own, it enqueues in a unit of work of its own (`units`: for routes
    and the scheduler, one statement); `into` enqueues in a unit of work the caller
    has open, so that the job commits with the caller's other writes or not at all.
    """

    def __init__(
        self,
        units: Callable[[], EnqueueUnitOfWork],
        catalog: JobCatalog,
        clock: Clock,
        default_max_attempts: int,
        *,
        hold: LineRules | None = None,
    ) -> None:
        """`hold`: fair dispatch is on (jobrail.dispatch): a job due now waits, held, for
        the dispatcher to release it, instead of its message leaving at the commit, placed
        in its tenant's line by these rules."""
        self._units = units
        self._catalog = catalog
        self._clock = clock
        self._default_max_attempts = default_max_attempts
        self._hold = hold

    async def __call__(self, cmd: EnqueueJobCommand) -> EnqueueResult:
        # The span covers the commit too: the fast-path publish is its child (which may
        # end after it: the commit does not wait for the broker).
        with _enqueue_span(cmd) as span:
            async with self._units() as uow:
                result = await self._record(uow, cmd, span)
                await uow.commit()
        return result

    async def into(self, uow: EnqueueUnitOfWork, cmd: EnqueueJobCommand) -> EnqueueResult:
        """Enqueue in `uow`'s open transaction; the caller commits."""
        with _enqueue_span(cmd) as span:
            return await self._record(uow, cmd, span)

    async def _record(
        self, uow: EnqueueUnitOfWork, cmd: EnqueueJobCommand, span: trace.Span
    ) -> EnqueueResult:
        job_type = self._catalog.get(cmd.type)  # once: the job and its message use it
        if job_type is None:
            raise InvalidInputError(f"unknown job type {cmd.type!r}")
        candidate = new_job(job_type, cmd, self._clock.now(), self._default_max_attempts)
        if self._hold is not None and holdable(candidate):
            due = candidate.run_after or candidate.created_at
            candidate.hold(self._hold.rank(due, candidate.priority))
        job = await uow.intake.add(candidate, message_for(candidate, job_type))
        created = job.id == candidate.id
        _traced(span, job, created=created)
        if not created and _same_key(job.idempotency_key, candidate.idempotency_key):
            _ensure_same_request(job, candidate)
        # Else the active job that holds the unique key: returned whatever its payload.
        return EnqueueResult(job=job, created=created)


class EnqueueOpenJob:
    """Enqueue a job a tenant asked for by its type's name (``POST /jobs``).

    - Only a type its module declared open to tenants (``open_to_tenants``) is taken.
      An internal type (housekeeping, webhook deliveries, flow callbacks, a module's own
      steps) and a name no module declared are refused alike, with the same words, so
      that the refusal tells nothing of which internal types exist.
    - Otherwise as EnqueueJob: the payload must fit, the Idempotency-Key is honoured.
    """

    def __init__(self, enqueue: EnqueueJob, catalog: JobCatalog) -> None:
        self._enqueue = enqueue
        self._catalog = catalog

    async def __call__(self, cmd: EnqueueJobCommand) -> EnqueueResult:
        job_type = self._catalog.get(cmd.type)
        if job_type is None or not job_type.open_to_tenants:
            raise InvalidInputError(
                f"job type {cmd.type!r} is not one a tenant may enqueue",
                details=[
                    {"loc": ["type"], "msg": "not a job type open to tenants", "type": "closed"}
                ],
            )
        return await self._enqueue(cmd)


def new_job(
    job_type: JobType, cmd: EnqueueJobCommand, now: datetime, default_max_attempts: int
) -> Job:
    payload = job_type.validate_payload(cmd.payload)
    run_after = cmd.run_after
    if cmd.debounce is not None:
        _debounceable(cmd)
        run_after = now + timedelta(seconds=cmd.debounce.window_s)
    return Job.create(
        id=JobId(new_id()),
        type=job_type.name,
        queue=job_type.queue,
        tenant_id=cmd.tenant_id,
        payload=payload,
        max_attempts=job_type.max_attempts or default_max_attempts,
        now=now,
        entity_id=cmd.entity_id,
        idempotency_key=cmd.idempotency_key,
        run_after=run_after,
        trace_context=dict(cmd.trace_context) or _current_trace_context(),
        deadline=cmd.deadline,
        unique_key=cmd.unique_key,
        debounce_key=None if cmd.debounce is None else cmd.debounce.key,
        capped=cmd.capped,
        priority=cmd.priority if cmd.priority is not None else job_type.priority,
        fair_key=job_type.fair_key_of(payload, cmd.tenant_id),
    )


def holdable(job: Job) -> bool:
    """Whether fair dispatch holds the job at its enqueue: one of no batch or chain (its
    flow releases it), not debounced (its payload may change until it starts). A job due
    later (run_at, delay) waits held too, and joins its tenant's line when it comes due."""
    return job.debounce_key is None and job.flow is None


def _debounceable(cmd: EnqueueJobCommand) -> None:
    """A debounced enqueue starts when its window closes, and collapses with the others
    of its key: a time to run at, an Idempotency-Key or a unique key would each say
    otherwise."""
    clashing = [
        name
        for name, given in (
            ("run_at/delay", cmd.run_after),
            ("Idempotency-Key", cmd.idempotency_key),
            ("unique_key", cmd.unique_key),
        )
        if given is not None
    ]
    if clashing:
        raise InvalidInputError(f"debounce cannot be combined with {', '.join(clashing)}")


def _current_trace_context() -> dict[str, str]:
    """The W3C context of the current span (traceparent, tracestate), for the labels of
    every message of the job: its worker's span continues this trace."""
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    return carrier


def _enqueue_span(cmd: EnqueueJobCommand) -> AbstractContextManager[trace.Span]:
    current = trace.get_current_span()
    if current.get_span_context().is_valid and not current.is_recording():
        # An unsampled trace: its child would be sampled out too (jobrail's samplers
        # follow the parent), and only its new span id would travel with the job.
        return nullcontext(current)
    return _tracer.start_as_current_span(
        f"enqueue {cmd.type}",
        kind=SpanKind.PRODUCER,
        attributes={"job.type": cmd.type, "tenant.id": cmd.tenant_id},
    )


def _traced(span: trace.Span, job: Job, *, created: bool) -> None:
    if span.is_recording():
        span.set_attribute("job.id", str(job.id))
        span.set_attribute("job.queue", job.queue)
        span.set_attribute("job.created", created)


def message_for(
    job: Job, job_type: JobType | None, not_before: datetime | None = None
) -> JobMessage:
    """The job's message, with the limit keys of its type (`job_type`; None for a type
    this process does not know: no keys) filled in: due at `not_before`, or when the job
    is (its run_after)."""
    # A debounced job's payload may change until it starts: its worker fills the keys in.
    keys = (
        None
        if job_type is None or job.debounce_key
        else job_type.limit_keys(job.payload, job.tenant_id)
    )
    return JobMessage.of(job, limit_keys=keys, not_before=not_before or job.run_after)


def _same_key(existing: str | None, candidate: str | None) -> bool:
    return candidate is not None and existing == candidate


def _ensure_same_request(existing: Job, candidate: Job) -> None:
    if existing.type != candidate.type or existing.payload != candidate.payload:
        raise ConflictError(
            f"Idempotency-Key {candidate.idempotency_key!r} was already used for a different "
            f"request (job {existing.id}, type {existing.type!r})"
        )
