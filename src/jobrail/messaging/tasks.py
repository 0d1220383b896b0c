"""Job types become Taskiq tasks: one task per job type, named after it.

Each task takes the job id, resolves the runner and the handler's dependencies
from the message's dishka request scope, and lets the runner do the rest, inside a
span whose parent is the trace context the message's labels carry (the enqueue's),
with the job's ids in every log line.
"""

import dataclasses
import logging
import time
from collections.abc import Mapping
from datetime import timedelta
from inspect import Parameter
from typing import Annotated, Any

from dishka import AsyncContainer, FromDishka
from dishka.integrations.base import wrap_injection
from dishka.integrations.taskiq import inject
from opentelemetry import trace
from opentelemetry.trace import SpanKind
from taskiq import AsyncBroker, Context, TaskiqDepends

from jobrail.jobs.context import JobContext
from jobrail.jobs.messages import JobMessage
from jobrail.jobs.registry import JobRegistry, JobSpec, parse_payload
from jobrail.jobs.runner import JobRun, JobRunner
from jobrail.kernel.errors import InvalidInputError, PermanentError
from jobrail.messaging.codec import UNKNOWN_TYPE_LABEL, UNKNOWN_TYPE_TASK, from_parts
from jobrail.telemetry.logging import log_context
from jobrail.telemetry.propagation import context_from_labels

_CONTAINER_PARAM = "dishka_container"
# The attempt of a job of an unknown type fails at once; this only bounds its lease.
_UNKNOWN_TYPE_TIMEOUT = timedelta(seconds=30)

log = logging.getLogger("jobrail.tasks")
_tracer = trace.get_tracer("jobrail.worker")


def register_job_tasks(
    broker: AsyncBroker, registry: JobRegistry, default_queue: str = "jobs.default"
) -> None:
    for spec in registry:
        broker.register_task(_task_for(spec, registry), task_name=spec.name)
    broker.register_task(_unknown_type_task(registry, default_queue), task_name=UNKNOWN_TYPE_TASK)


def _unknown_type_task(registry: JobRegistry, default_queue: str) -> Any:
    """Runs a job whose type no task here has (a worker deployed without its module, a
    queue group that took another group's job): its single attempt fails with the
    reason, so its status says so and the DLQ holds it, to redrive once a worker knows
    the type. (Taskiq itself would log and drop such a message; Celery leaves the
    task PENDING.) The brokers send such messages here (`reroute_unknown_type`)."""
    known = {spec.name for spec in registry}

    @inject(patch_module=True)
    async def run_unknown_type(
        job_id: str,
        runner: FromDishka[JobRunner],
        context: Annotated[Context, TaskiqDepends()],
    ) -> None:
        labels = context.message.labels
        named = str(labels.get(UNKNOWN_TYPE_LABEL, ""))
        # A message that names a type this worker knows did not come from a broker's
        # reroute: with this task's name as its type it never matches the job's row,
        # so the runner dead-letters it without touching the job.
        job_type = UNKNOWN_TYPE_TASK if named in known or not named else named

        async def unknown(_payload: Mapping[str, Any], _ctx: JobContext) -> Any:
            raise PermanentError(
                f"no worker here runs job type {job_type!r}: deploy one that does, "
                "then redrive the job"
            )

        delivery = dataclasses.replace(_delivery(default_queue, context), job_type=job_type)
        fields = {"job_id": job_id, "job_type": job_type, "task_id": delivery.message_id}
        with log_context({**fields, "tenant_id": delivery.tenant_id}):
            await runner.run(delivery, JobRun(handler=unknown, timeout=_UNKNOWN_TYPE_TIMEOUT))

    return run_unknown_type


def _task_for(spec: JobSpec, registry: JobRegistry) -> Any:
    timeout = registry.timeout(spec.name)
    handler = wrap_injection(
        func=spec.handler,
        is_async=True,
        remove_depends=True,
        additional_params=[
            Parameter(_CONTAINER_PARAM, Parameter.KEYWORD_ONLY, annotation=AsyncContainer)
        ],
        container_getter=lambda _args, kwargs: kwargs[_CONTAINER_PARAM],
    )
    # dishka hands back the function itself when it asks for no dependencies.
    needs_container = handler is not spec.handler
    span_name = f"run {spec.name}"

    @inject(patch_module=True)
    async def run_job(
        job_id: str,
        runner: FromDishka[JobRunner],
        container: FromDishka[AsyncContainer],
        context: Annotated[Context, TaskiqDepends()],
    ) -> None:
        async def bound(payload: Mapping[str, Any], ctx: JobContext) -> Any:
            try:
                model = parse_payload(spec, payload)
            except InvalidInputError as exc:
                raise PermanentError(f"{exc}: {exc.details}") from None
            if needs_container:
                return await handler(model, ctx, **{_CONTAINER_PARAM: container})
            return await handler(model, ctx)

        labels = context.message.labels
        delivery = _delivery(spec.queue, context)
        started = time.perf_counter()
        with (
            _tracer.start_as_current_span(
                span_name,
                context=context_from_labels(labels),
                kind=SpanKind.CONSUMER,
                attributes={
                    "job.id": job_id,
                    "job.type": spec.name,
                    "job.queue": delivery.queue,
                    "job.deferrals": delivery.deferrals,
                    "tenant.id": delivery.tenant_id,
                    "messaging.message.id": delivery.message_id,
                },
            ),
            log_context(
                {
                    "job_id": job_id,
                    "job_type": spec.name,
                    "task_id": delivery.message_id,
                    "tenant_id": delivery.tenant_id,
                }
            ),
        ):
            await runner.run(delivery, JobRun(handler=bound, timeout=timeout, limits=spec.limits))
            if log.isEnabledFor(logging.DEBUG):
                log.debug(
                    "delivery of job %s handled",
                    job_id,
                    extra={"duration_ms": round((time.perf_counter() - started) * 1000, 2)},
                )

    run_job.__name__ = run_job.__qualname__ = spec.name.replace(".", "_")
    return run_job


def _delivery(default_queue: str, context: Context) -> JobMessage:
    """The delivery as the job message it is (the broker checked it before Taskiq ran it)."""
    message = context.message
    return from_parts(
        task_id=message.task_id,
        task_name=message.task_name,
        kwargs=message.kwargs,
        labels=message.labels,
        default_queue=default_queue,
    )
