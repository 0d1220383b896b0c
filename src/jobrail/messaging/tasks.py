"""Job types become Taskiq tasks: one task per job type, named after it.

Each task takes the job id, resolves the runner and the handler's dependencies
from the message's dishka request scope, and lets the runner do the rest.
"""

import uuid
from collections.abc import Mapping
from datetime import UTC, datetime
from inspect import Parameter
from typing import Annotated, Any

from dishka import AsyncContainer, FromDishka
from dishka.integrations.base import wrap_injection
from dishka.integrations.taskiq import inject
from taskiq import AsyncBroker, Context, TaskiqDepends

from jobrail.jobs.context import JobContext
from jobrail.jobs.registry import JobRegistry, JobSpec, parse_payload
from jobrail.jobs.runner import Delivery, JobRun, JobRunner
from jobrail.kernel.errors import InvalidInputError, PermanentError
from jobrail.kernel.ids import JobId

_CONTAINER_PARAM = "dishka_container"


def register_job_tasks(broker: AsyncBroker, registry: JobRegistry) -> None:
    for spec in registry:
        broker.register_task(_task_for(spec, registry), task_name=spec.name)


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
        delivery = Delivery(
            job_id=JobId(uuid.UUID(job_id)),
            job_type=spec.name,
            queue=str(labels.get("queue_name") or spec.queue),
            tenant_id=str(labels.get("tenant_id", "")),
            message_id=context.message.task_id,
            deferrals=int(labels.get("deferrals", 0)),
            not_before=_when(labels.get("not_before")),
            prepaid=tuple(str(key) for key in labels.get("prepaid", ())),
            limit_keys=_keys(labels.get("limit_keys")),
        )
        await runner.run(delivery, JobRun(handler=bound, timeout=timeout, limits=spec.limits))

    run_job.__name__ = run_job.__qualname__ = spec.name.replace(".", "_")
    return run_job


def _when(value: object) -> datetime | None:
    if isinstance(value, int | float):
        return datetime.fromtimestamp(value, UTC)
    return None


def _keys(value: object) -> tuple[str, ...] | None:
    if isinstance(value, list):
        return tuple(str(key) for key in value)
    return None
