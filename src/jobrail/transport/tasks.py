"""How a worker runs job messages: `JobRoutes`, and one Taskiq task per job type.

For every job type of the registry, `JobRoutes` holds its route: the handler bound
to its dependencies (a dishka request scope per attempt, only for a handler that asks
for dependencies), its timeout and its limits. `JobRoutes.run` runs one delivery
through the runner inside a span whose parent is the trace context the message
carries (the enqueue's), with the job's ids in every log line. Where nothing is
recorded (no exporter), it makes no span and runs in the enqueue's trace context.

The receiver of the worker processes and of the embedded broker
(``jobrail.transport.receiver.JobReceiver``) runs job messages straight through their
route. Each job type is also a Taskiq task named after it, which does the same, for
every other way Taskiq runs a message (any receiver a deployment chooses); and the
unknown-type task fails the job of a type no route here has.
"""

import dataclasses
import logging
import time
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from datetime import timedelta
from inspect import Parameter
from typing import Annotated, Any

from dishka import AsyncContainer
from dishka.integrations.base import wrap_injection
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.context import Context as OtelContext
from opentelemetry.trace import SpanKind
from taskiq import AsyncBroker, Context, TaskiqDepends

from jobrail.jobs.messages import JobMessage
from jobrail.jobs.registry import JobRegistry, JobSpec, parse_payload
from jobrail.kernel.errors import InvalidInputError, PermanentError
from jobrail.telemetry.logging import log_context
from jobrail.telemetry.propagation import AMQP_PROCESS, context_from_labels
from jobrail.telemetry.tracing import spans_sampled
from jobrail.transport.codec import (
    UNKNOWN_TYPE_LABEL,
    UNKNOWN_TYPE_TASK,
    MalformedMessageError,
    decode,
    from_parts,
)
from jobrail.worker.attempt import Handler, JobRun
from jobrail.worker.context import JobContext
from jobrail.worker.runner import JobRunner

_CONTAINER_PARAM = "dishka_container"
# The attempt of a job of an unknown type fails at once; this only bounds its lease.
_UNKNOWN_TYPE_TIMEOUT = timedelta(seconds=30)

log = logging.getLogger("jobrail.tasks")
_tracer = trace.get_tracer("jobrail.worker")


@dataclass(frozen=True, slots=True)
class _Route:
    spec: JobSpec
    job_run: JobRun
    span_name: str


@dataclass(frozen=True, slots=True)
class Routed:
    """A delivery and the route of its type, found once (``JobRoutes.routed``) and
    handed to ``JobRoutes.run_routed``."""

    message: JobMessage
    route: _Route


class JobRoutes:
    """The route of every job type this process runs (see the module)."""

    def __init__(
        self,
        registry: JobRegistry,
        default_queue: str,
        *,
        batch_window_s: float = 0.0,
        wave_size: int = 1,
        wave_wait_s: float = 0.0,
    ) -> None:
        self.registry = registry
        self.default_queue = default_queue
        # For the worker's receiver (jobrail.transport.receiver):
        self.batch_window_s = batch_window_s
        """How long it waits for more deliveries to start together."""
        self.wave_size = wave_size
        """While this many jobs run, it starts deliveries in waves of this many..."""
        self.wave_wait_s = wave_wait_s
        """...holding a wave's first delivery this long at most."""
        self._routes: dict[str, _Route] = {}
        self._container: AsyncContainer | None = None
        self._runner: JobRunner | None = None

    def use(self, container: AsyncContainer) -> None:
        """Bind every handler to `container` (its request scopes are the attempts')."""
        self._container = container
        self._routes = {spec.name: self._route(spec, container) for spec in self.registry}

    async def start(self) -> None:
        """Resolve the runner once, so that a delivery awaits nothing before its first
        call to Redis or Postgres (the worker's start-up does it; `run` too, if not)."""
        if self._runner is None:
            if self._container is None:
                raise RuntimeError("JobRoutes.use(container) must come first")
            self._runner = await self._container.get(JobRunner)

    def knows(self, job_type: str) -> bool:
        return self.registry.spec(job_type) is not None

    def delivery(self, body: bytes) -> Routed | None:
        """The job message in `body` and its route if it is one of a type routed here,
        else None."""
        try:
            message = decode(body)
        except MalformedMessageError:
            return None
        return self.routed(message)

    def routed(self, message: JobMessage) -> Routed | None:
        """`message` (its queue filled in) and its route if its type is routed here, else
        None."""
        if self._container is None:  # not wired yet: Taskiq's path says so
            return None
        route = self._routes.get(message.job_type)
        if route is None:
            return None
        if not message.queue:  # a message that does not name its queue: its type's
            message = dataclasses.replace(message, queue=route.spec.queue)
        return Routed(message, route)

    async def run(self, delivery: JobMessage, *, job_type: str | None = None) -> None:
        """Run one delivery to its end (see JobRunner.run): the route of its job type,
        or with `job_type` given, of a type no route here has (the job fails)."""
        route = self._routes.get(delivery.job_type) if job_type is None else None
        if route is not None:
            await self._run(delivery, route.job_run, route.span_name)
            return
        named = job_type or delivery.job_type
        await self._run(
            dataclasses.replace(delivery, job_type=named),
            JobRun(handler=_fails_unknown(named), timeout=_UNKNOWN_TYPE_TIMEOUT),
            f"run {UNKNOWN_TYPE_TASK}",
        )

    async def run_routed(self, routed: Routed) -> None:
        """Run a delivery whose route ``routed`` found (the receiver's path)."""
        await self._run(routed.message, routed.route.job_run, routed.route.span_name)

    async def _run(self, delivery: JobMessage, job_run: JobRun, span_name: str) -> None:
        if self._runner is None:
            await self.start()
        runner = self._runner
        assert runner is not None
        started = time.perf_counter()
        parent = context_from_labels(dict(delivery.trace_context))
        if spans_sampled():
            scope: AbstractContextManager[object] = _tracer.start_as_current_span(
                span_name,
                context=parent,
                kind=SpanKind.CONSUMER,
                attributes={
                    **AMQP_PROCESS,
                    "messaging.destination.name": delivery.queue,
                    "job.id": str(delivery.job_id),
                    "job.type": delivery.job_type,
                    "job.queue": delivery.queue,
                    "job.deferrals": delivery.deferrals,
                    "tenant.id": delivery.tenant_id,
                    "messaging.message.id": delivery.message_id,
                },
            )
        else:
            # Nothing is recorded: no span of its own (making one cost more than a tenth
            # of a no-op job), only the enqueue's trace context, so that the job's log
            # lines and the messages it sends still carry the job's trace id.
            scope = _attached(parent)
        with (
            scope,
            log_context(
                {
                    "job_id": str(delivery.job_id),
                    "job_type": delivery.job_type,
                    "task_id": delivery.message_id,
                    "tenant_id": delivery.tenant_id,
                }
            ),
        ):
            await runner.run(delivery, job_run)
            if log.isEnabledFor(logging.DEBUG):
                log.debug(
                    "delivery of job %s handled",
                    delivery.job_id,
                    extra={"duration_ms": round((time.perf_counter() - started) * 1000, 2)},
                )

    def _route(self, spec: JobSpec, container: AsyncContainer) -> _Route:
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

        async def bound(payload: Mapping[str, Any], ctx: JobContext) -> Any:
            try:
                model = parse_payload(spec, payload)
            except InvalidInputError as exc:
                raise PermanentError(f"{exc}: {exc.details}") from None
            if not needs_container:
                return await handler(model, ctx)
            async with container() as request:  # the attempt's request scope
                return await handler(model, ctx, **{_CONTAINER_PARAM: request})

        job_run = JobRun(
            handler=bound,
            timeout=self.registry.timeout(spec.name),
            limits=spec.limits,
            retry_base_s=spec.retry_base_s,
            retry_cap_s=spec.retry_cap_s,
            max_wait=None if spec.max_wait_s is None else timedelta(seconds=spec.max_wait_s),
        )
        return _Route(spec, job_run, f"run {spec.name}")


@contextmanager
def _attached(context: OtelContext) -> Iterator[None]:
    token = otel_context.attach(context)
    try:
        yield
    finally:
        otel_context.detach(token)


def _fails_unknown(job_type: str) -> Handler:
    async def unknown(_payload: Mapping[str, Any], _ctx: JobContext) -> Any:
        raise PermanentError(
            f"no worker here runs job type {job_type!r}: deploy one that does, then redrive the job"
        )

    return unknown


# Where a broker keeps the routes of its job types (for jobrail's receiver).
ROUTES_STATE = "jobrail_job_routes"


def register_job_tasks(broker: AsyncBroker, routes: JobRoutes) -> None:
    """One Taskiq task per job type, named after it, and the unknown-type task; the
    routes are kept in the broker's state for `JobReceiver`."""
    broker.state[ROUTES_STATE] = routes
    for spec in routes.registry:
        broker.register_task(_task_for(spec, routes), task_name=spec.name)
    broker.register_task(_unknown_type_task(routes), task_name=UNKNOWN_TYPE_TASK)


def _unknown_type_task(routes: JobRoutes) -> Any:
    """Runs a job whose type no task here has (a worker deployed without its module, a
    queue group that took another group's job): its single attempt fails with the
    reason, so its status says so and the DLQ holds it, to redrive once a worker knows
    the type. (Taskiq itself would log and drop such a message; Celery leaves the
    task PENDING.) The brokers send such messages here (`reroute_unknown_type`)."""

    async def run_unknown_type(job_id: str, context: Annotated[Context, TaskiqDepends()]) -> None:
        named = str(context.message.labels.get(UNKNOWN_TYPE_LABEL, ""))
        # A message that names a type this worker knows did not come from a broker's
        # reroute: with this task's name as its type it never matches the job's row,
        # so the runner dead-letters it without touching the job.
        job_type = UNKNOWN_TYPE_TASK if routes.knows(named) or not named else named
        await routes.run(_delivery(routes.default_queue, context), job_type=job_type)

    return run_unknown_type


def _task_for(spec: JobSpec, routes: JobRoutes) -> Any:
    async def run_job(job_id: str, context: Annotated[Context, TaskiqDepends()]) -> None:
        await routes.run(_delivery(spec.queue, context))

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
