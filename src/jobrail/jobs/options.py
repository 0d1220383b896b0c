"""The enqueue options over HTTP: ``run_at`` or ``delay``, ``deadline``, ``unique_key``,
``debounce_key`` with ``debounce_s``, ``priority``.

``POST /jobs`` takes them in its body (``EnqueueOptions``' fields). A route whose body
is the job's payload (``POST /demo/echo``) takes them as query parameters
(``?delay=30``): ``EnqueueOptionsQuery``, with ``ENQUEUE_OPENAPI`` in its ``openapi_extra``.
Either way ``command`` checks them (``jobrail.jobs.timing.resolve_options``) against the
app's clock and makes the ``EnqueueJobCommand``.
"""

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Annotated, Any, ClassVar, Literal

from fastapi import Depends, Request
from fastapi.exceptions import RequestValidationError
from pydantic import AwareDatetime, ConfigDict, Field, ValidationError

from jobrail.http.schemas import IDEMPOTENCY_KEY_OPENAPI, RequestModel
from jobrail.jobs.intake import MAX_DEBOUNCE_S, EnqueueJobCommand, ValidatedPayload
from jobrail.jobs.timing import MAX_DELAY, MAX_UNIQUE_KEY_LENGTH, CommandOptions, resolve_options
from jobrail.jobs.timing import NO_OPTIONS as NO_COMMAND_OPTIONS
from jobrail.kernel.clock import Clock
from jobrail.kernel.errors import InvalidInputError
from jobrail.kernel.ids import TenantId


class EnqueueOptions(RequestModel):
    """When a job may start, by when it must have, and the key it is unique by."""

    where: ClassVar[str] = "body"
    """Where the request gave them: the ``loc`` of a refusal starts with it."""

    run_at: AwareDatetime | None = Field(
        default=None,
        strict=False,
        description="When the job may start, with its time zone (a past time: at once); "
        "at most 366 days ahead. Not with `delay`.",
    )
    delay: float | None = Field(
        default=None,
        ge=0,
        le=MAX_DELAY.total_seconds(),
        allow_inf_nan=False,
        description="Seconds from now before the job may start (at most 366 days). "
        "Not with `run_at`.",
    )
    deadline: AwareDatetime | None = Field(
        default=None,
        strict=False,
        description="When the job must have started by, with its time zone: no attempt "
        "starts at or after it, and a job still waiting then ends `expired`. After the "
        "job may start.",
    )
    unique_key: str | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_UNIQUE_KEY_LENGTH,
        description="While a job of this type with this key is pending, retrying or "
        "running, the enqueue returns it instead of making a new one.",
    )
    debounce_key: str | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_UNIQUE_KEY_LENGTH,
        description="Enqueues of this type with this key within `debounce_s` of the first "
        "collapse into one job, which starts when the window closes with the last "
        "payload (the later enqueues answer with its job_id). With `debounce_s`; not "
        "with `run_at`, `delay`, `unique_key` or an Idempotency-Key.",
    )
    debounce_s: float | None = Field(
        default=None,
        gt=0,
        le=MAX_DEBOUNCE_S,
        allow_inf_nan=False,
        description="The debounce window, in seconds (at most a day). With `debounce_key`.",
    )
    priority: Literal["low", "normal", "high", "urgent"] | None = Field(
        default=None,
        description="Its place among the tenant's jobs under fair dispatch: a higher one "
        "goes ahead of the lower ones due less than the difference of their head starts "
        "before it (by default low 0 s, normal 30 s, high 120 s, urgent 600 s), so none "
        "waits behind higher ones forever. Default: its type's.",
    )

    @property
    def none_given(self) -> bool:
        return self is NO_OPTIONS or not self.model_fields_set

    def command(
        self,
        clock: Clock | None,
        *,
        tenant_id: TenantId,
        type: str,
        payload: Mapping[str, Any] | ValidatedPayload,
        idempotency_key: str | None = None,
        entity_id: str | None = None,
    ) -> EnqueueJobCommand:
        """The command to enqueue with these options, resolved at the time of `clock`
        (the app's; without one, the system's): a 422 naming each option that does not
        hold (``run_at`` with ``delay``, a ``deadline`` not after the start)."""
        # Most enqueues give no option: nothing to resolve.
        options = NO_COMMAND_OPTIONS if self.none_given else self.resolved(clock)
        return options.command(
            tenant_id=tenant_id,
            type=type,
            payload=payload,
            idempotency_key=idempotency_key,
            entity_id=entity_id,
        )

    def resolved(self, clock: Clock | None) -> CommandOptions:
        """The options checked at the time of `clock` (the system's without one); a 422
        naming each that does not hold."""
        now = clock.now() if clock is not None else datetime.now(UTC)
        try:
            return resolve_options(
                now,
                run_at=self.run_at,
                delay=self.delay,
                deadline=self.deadline,
                unique_key=self.unique_key,
                debounce_key=self.debounce_key,
                debounce_s=self.debounce_s,
                priority=self.priority,
            )
        except InvalidInputError as refused:
            raise RequestValidationError(
                [{**detail, "loc": (self.where, *detail["loc"])} for detail in refused.details]
            ) from None


class _QueryOptions(EnqueueOptions):
    """The options as query parameters: strings, converted as FastAPI converts a query's."""

    model_config = ConfigDict(strict=False, extra="ignore", frozen=True)
    where: ClassVar[str] = "query"


_NAMES = tuple(EnqueueOptions.model_fields)
NO_OPTIONS: EnqueueOptions = _QueryOptions()


async def enqueue_options(request: Request) -> EnqueueOptions:
    """The request's enqueue options, from its query string (none without one).
    Async: FastAPI runs a plain function's dependency in a thread, on every request.

    Read from the request rather than declared as four ``Query`` parameters: FastAPI's
    parameter machinery costs each request of a hot route (``POST /demo/echo``) for
    options most requests do not give (see ``jobrail.http.schemas.idempotency_key``);
    ``ENQUEUE_OPENAPI`` documents them as FastAPI would have."""
    if not request.scope.get("query_string"):
        return NO_OPTIONS
    query = request.query_params
    given = {name: query[name] for name in _NAMES if name in query}
    if not given:
        return NO_OPTIONS
    try:
        return _QueryOptions.model_validate(given)
    except ValidationError as exc:
        raise RequestValidationError(
            [
                {
                    "type": error["type"],
                    "loc": ("query", *error["loc"]),
                    "msg": error["msg"],
                    "input": error.get("input"),
                }
                for error in exc.errors(include_url=False, include_context=False)
            ]
        ) from None


EnqueueOptionsQuery = Annotated[EnqueueOptions, Depends(enqueue_options)]
"""A route's enqueue options, as query parameters (with ``ENQUEUE_OPENAPI``)."""


def _query_parameters() -> list[dict[str, Any]]:
    properties = EnqueueOptions.model_json_schema()["properties"]
    parameters = []
    for name in _NAMES:
        schema = dict(properties[name])
        description = schema.pop("description", "")
        schema.pop("default", None)
        parameters.append(
            {
                "name": name,
                "in": "query",
                "required": False,
                "description": description,
                "schema": schema,
            }
        )
    return parameters


ENQUEUE_OPENAPI: dict[str, Any] = {
    "parameters": [*IDEMPOTENCY_KEY_OPENAPI["parameters"], *_query_parameters()]
}
"""A route's ``openapi_extra`` for the Idempotency-Key header and the enqueue options."""


async def app_clock(request: Request, options: EnqueueOptions) -> Clock | None:
    """The app's clock, looked up only when `options` has times to resolve: a hot route
    (``POST /demo/echo``) need not resolve one more dependency on every request."""
    if options.none_given:
        return None
    container: Any = getattr(request.app.state, "dishka_container", None)
    return None if container is None else await container.get(Clock)
