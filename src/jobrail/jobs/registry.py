"""Job types as declared by the modules, and the catalog the use cases read.

A module declares a job type with the ``job`` decorator on its handler::

    class EchoPayload(BaseModel):
        message: str

    @job("demo.echo", payload=EchoPayload, queue="jobs.default", timeout_s=30)
    async def echo(payload: EchoPayload, ctx: JobContext) -> dict[str, str]:
        return {"echo": payload.message}

The handler may also ask for dependencies with ``FromDishka[...]``; the worker
resolves them from the task's request scope.
"""

import inspect
import re
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import timedelta
from typing import Any

from pydantic import BaseModel, ValidationError

from jobrail.jobs.intake import ValidatedPayload
from jobrail.jobs.priority import Priority
from jobrail.kernel.errors import InvalidInputError
from jobrail.limits.model import JobLimits, KeyTemplate, Limit, Lock, RateOrSlots

JOB_NAME = re.compile(r"^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)+$")
MAX_NAME_LENGTH = 128  # of a job type's name and of its queue's

HandlerFunc = Callable[..., Awaitable[Mapping[str, Any] | None]]


@dataclass(frozen=True, slots=True)
class JobSpec:
    name: str
    handler: HandlerFunc
    payload: type[BaseModel]
    queue: str = "jobs.default"
    timeout_s: float | None = None
    max_attempts: int | None = None
    description: str = ""
    limits: JobLimits = field(default_factory=JobLimits)
    retry_base_s: float | None = None
    """The first retry's upper bound for this type (JOBRAIL_RETRY__BASE_S otherwise)."""
    retry_cap_s: float | None = None
    """The longest wait between this type's retries (JOBRAIL_RETRY__CAP_S otherwise)."""
    max_wait_s: float | None = None
    """How long a job of this type may wait for its limits and lock (from its first
    deferral since it last ran) before it fails without running; None: no cap."""
    priority: Priority = Priority.NORMAL
    """Its jobs' priority when an enqueue gives none (jobrail.jobs.priority)."""
    fair_key: str | None = None
    """A second level of fair dispatch inside a tenant's share: a key template over the
    payload's fields and ``tenant_id`` (``"{user_id}"``); the keys a tenant's waiting
    jobs have share its releases equally. None: one line per tenant."""
    open_to_tenants: bool = False
    """Whether a tenant may enqueue it by its name over HTTP (``POST /jobs``). Internal
    types (housekeeping, webhook deliveries, flow callbacks, a module's own steps) stay
    closed: only the module's own code enqueues them."""

    def __post_init__(self) -> None:
        if not JOB_NAME.match(self.name):
            raise ValueError(
                f"job type name {self.name!r} must be dotted lower-case words, "
                "such as 'billing.pay_invoice'"
            )
        for what, text in (("name", self.name), ("queue", self.queue)):
            # What the jobs table stores them in: a longer one failed at its first enqueue.
            if len(text) > MAX_NAME_LENGTH:
                raise ValueError(
                    f"job type {self.name[:40]}…: its {what} is longer than "
                    f"{MAX_NAME_LENGTH} characters"
                )
        # Checked when declared: a plain function, or a dict as the payload, failed only
        # when a job ran (the payload's with an AttributeError).
        if not (isinstance(self.payload, type) and issubclass(self.payload, BaseModel)):
            raise ValueError(
                f"job type {self.name}: payload must be a pydantic model class "
                f"(got {self.payload!r})"
            )
        call = getattr(self.handler, "__call__", None)  # noqa: B004 - an async __call__ too
        if not (inspect.iscoroutinefunction(self.handler) or inspect.iscoroutinefunction(call)):
            raise ValueError(
                f"job type {self.name}: its handler must be an async function "
                "(async def handler(payload, ctx))"
            )
        if self.max_attempts is not None and self.max_attempts < 1:
            raise ValueError(f"job type {self.name}: max_attempts must be at least 1")
        for name, value in (
            ("retry_base_s", self.retry_base_s),
            ("retry_cap_s", self.retry_cap_s),
            ("max_wait_s", self.max_wait_s),
        ):
            if value is not None and value <= 0:
                raise ValueError(f"job type {self.name}: {name} must be positive")
        if self.timeout_s is not None and self.timeout_s <= 0:
            raise ValueError(f"job type {self.name}: timeout_s must be positive")
        self.limits.check_fields(self.name, [*self.payload.model_fields, "tenant_id"])
        if self.fair_key is not None:
            for name in KeyTemplate(self.fair_key).fields:
                if name not in {*self.payload.model_fields, "tenant_id"}:
                    raise ValueError(
                        f"job type {self.name!r}: fair_key {self.fair_key!r} names field "
                        f"{name!r}, which its payload does not have"
                    )


def job(
    name: str,
    *,
    payload: type[BaseModel],
    queue: str = "jobs.default",
    timeout_s: float | None = None,
    max_attempts: int | None = None,
    limits: Sequence[RateOrSlots] = (),
    lock: Lock | None = None,
    retry_base_s: float | None = None,
    retry_cap_s: float | None = None,
    max_wait_s: float | None = None,
    open_to_tenants: bool = False,
    priority: Priority | str = Priority.NORMAL,
    fair_key: str | None = None,
) -> Callable[[HandlerFunc], JobSpec]:
    """Declare a job type whose handler is the decorated function.

    ``limits`` and ``lock`` are acquired together, all or nothing, before each attempt;
    their keys are templates over the payload's fields and ``tenant_id``.
    ``max_attempts``, ``retry_base_s`` and ``retry_cap_s`` override the platform's retry
    policy for this type (exponential backoff with full jitter between attempts).
    ``max_wait_s`` caps how long a job may wait for its limits and lock, from its first
    deferral since it last ran: past it, the job fails without running, saying what it
    waited for. ``open_to_tenants`` lets a tenant enqueue it by its name over HTTP
    (``POST /jobs``, with its payload as JSON); a type is closed unless it says so.
    ``priority`` is its jobs' when an enqueue gives none (``"low"`` to ``"urgent"``).
    ``fair_key`` (a key template, like a limit's) splits a tenant's share of a queue
    equally between the keys of its waiting jobs, under fair dispatch."""

    def declare(handler: HandlerFunc) -> JobSpec:
        return JobSpec(
            name=name,
            handler=handler,
            payload=payload,
            queue=queue,
            timeout_s=timeout_s,
            max_attempts=max_attempts,
            description=(handler.__doc__ or "").strip(),
            limits=JobLimits(limits=tuple(limits), lock=lock),
            retry_base_s=retry_base_s,
            retry_cap_s=retry_cap_s,
            max_wait_s=max_wait_s,
            open_to_tenants=open_to_tenants,
            priority=Priority.of(priority),
            fair_key=fair_key,
        )

    return declare


@dataclass(frozen=True, slots=True)
class RegisteredType:
    """A declared job type as the enqueue path sees it (``jobrail.jobs.intake.JobType``):
    made once per type when the registry is built, so an enqueue resolves its type with
    one dictionary lookup and asks it, not the registry, for its payload and keys."""

    spec: JobSpec

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def queue(self) -> str:
        return self.spec.queue

    @property
    def max_attempts(self) -> int | None:
        return self.spec.max_attempts

    @property
    def open_to_tenants(self) -> bool:
        return self.spec.open_to_tenants

    @property
    def priority(self) -> Priority:
        return self.spec.priority

    @property
    def description(self) -> str:
        return self.spec.description

    def validate_payload(self, payload: Mapping[str, Any] | ValidatedPayload) -> dict[str, Any]:
        spec = self.spec
        if type(payload) is spec.payload:  # validated when it was made (a route's body)
            return dump_payload(spec, payload)
        if not isinstance(payload, Mapping):
            raise InvalidInputError(
                f"the payload of a {spec.name!r} job is a {spec.payload.__name__} or a "
                f"mapping, not a {type(payload).__name__}"
            )
        return dump_payload(spec, parse_payload(spec, payload))

    def limit_keys(self, payload: Mapping[str, Any], tenant_id: str) -> list[str] | None:
        if not self.spec.limits:
            return None
        return self.spec.limits.keys({**payload, "tenant_id": tenant_id})

    def fair_key_of(self, payload: Mapping[str, Any], tenant_id: str) -> str:
        if self.spec.fair_key is None:
            return ""
        return KeyTemplate(self.spec.fair_key).render({**payload, "tenant_id": tenant_id})


class JobRegistry:
    """Every job type this process knows, checked against the configured queues and,
    with `redis_cluster`, refused if its limit keys could fall on different slots of a
    Redis Cluster (see ``jobrail.limits.model.slot_part``)."""

    def __init__(
        self,
        specs: Iterable[JobSpec],
        *,
        queues: Sequence[str],
        default_timeout_s: float,
        timeouts_s: Mapping[str, float] | None = None,
        redis_cluster: bool = False,
    ) -> None:
        self._specs: dict[str, JobSpec] = {}
        self._types: dict[str, RegisteredType] = {}
        for spec in specs:
            if spec.name in self._specs:
                raise ValueError(f"job type {spec.name!r} is declared twice")
            if spec.queue not in queues:
                raise ValueError(
                    f"job type {spec.name!r} uses queue {spec.queue!r}, "
                    f"which is not configured (queues: {', '.join(queues)})"
                )
            if redis_cluster:
                spec.limits.check_one_slot(spec.name)
            self._specs[spec.name] = spec
            self._types[spec.name] = RegisteredType(spec)
        _check_shared_keys(self._specs.values())
        self._default_timeout_s = default_timeout_s
        self._timeouts_s = dict(timeouts_s or {})
        unknown = set(self._timeouts_s) - set(self._specs)
        if unknown:
            raise ValueError(f"timeouts are set for unknown job types: {sorted(unknown)}")

    def __iter__(self) -> Iterator[JobSpec]:
        return iter(self._specs.values())

    def spec(self, name: str) -> JobSpec | None:
        return self._specs.get(name)

    def own_max_attempts(self) -> frozenset[str]:
        """The job types that declare a max_attempts of their own, which then bounds
        their unexpected errors too (``RetryPolicy.own_max_attempts``)."""
        return frozenset(spec.name for spec in self if spec.max_attempts is not None)

    def get(self, name: str) -> RegisteredType | None:
        return self._types.get(name)

    def timeout(self, name: str) -> timedelta:
        spec = self._specs[name]
        seconds = self._timeouts_s.get(name) or spec.timeout_s or self._default_timeout_s
        return timedelta(seconds=seconds)


def _check_shared_keys(specs: Iterable[JobSpec]) -> None:
    """Job types may share a limit by using the same key; they must then agree on it."""
    seen: dict[tuple[str, str], tuple[str, object]] = {}
    for spec in specs:
        for limit in spec.limits.all():
            identity = (limit.kind, KeyTemplate(limit.key).template)
            params = {k: v for k, v in _fields(limit).items() if k != "name"}
            if identity in seen and seen[identity][1] != params:
                raise ValueError(
                    f"job types {seen[identity][0]!r} and {spec.name!r} share the "
                    f"{limit.kind} key {limit.key!r} with different settings"
                )
            seen.setdefault(identity, (spec.name, params))


def _fields(limit: Limit) -> dict[str, object]:
    return asdict(limit)


def parse_payload(spec: JobSpec, payload: Mapping[str, Any]) -> BaseModel:
    try:
        # A payload that is no object (a row written past the API) fails validation as
        # any other misfit does, rather than raising from dict().
        return spec.payload.model_validate(
            dict(payload) if isinstance(payload, Mapping) else payload
        )
    except ValidationError as exc:
        raise InvalidInputError(
            f"payload does not fit job type {spec.name!r}",
            details=[
                {"loc": list(error["loc"]), "msg": error["msg"], "type": error["type"]}
                for error in exc.errors(include_url=False, include_input=False)
            ],
        ) from None


def dump_payload(spec: JobSpec, model: BaseModel) -> dict[str, Any]:
    return model.model_dump(mode="json")
