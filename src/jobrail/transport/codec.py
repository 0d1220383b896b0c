"""The job messages' wire format: the one place that knows it.

A job message (``jobrail.jobs.messages.JobMessage``) travels as a Taskiq message
(JSON, never pickle) for the task named after the job type, whose only argument is
the job id; what the worker needs besides (tenant, queue, due time, limit keys,
deferrals, reservations, outages, trace context) rides in its labels. A dead letter
is the message that died, unchanged, with its reason and origin in headers.

`encode` makes the ``Envelope`` a broker publishes and the outbox stores; `decode`
(and `from_parts`, for a message Taskiq's receiver has parsed already) reads one back,
strictly: anything else is a `MalformedMessageError`, dead-lettered with its reason.
"""

import asyncio
import json
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

from jobrail.jobs.messages import DeadLetter, DeadLetterMessage, JobMessage, Outgoing
from jobrail.kernel.ids import JobId, new_id
from jobrail.kernel.json_text import bytes_have_nul_escape

HEADER_REASON = "x-jobrail-reason"
HEADER_SOURCE_QUEUE = "x-jobrail-source-queue"
HEADER_JOB_ID = "x-jobrail-job-id"
HEADER_TASK = "x-jobrail-task"
HEADER_DEAD_AT = "x-jobrail-dead-lettered-at"
# A dead letter keeps the AMQP message id of the message that died (the outbox row it
# is written to needs an id of its own): publishers send it under this id.
HEADER_MESSAGE_ID = "x-jobrail-message-id"
# On the dead letter of a failed job: the job's finished_at when it failed. It tells
# the letter of the job's current failure from stale ones (see RedriveDeadLetters).
HEADER_JOB_FAILED_AT = "x-jobrail-job-failed-at"


@dataclass(frozen=True, slots=True)
class Envelope:
    """One message to publish to a queue (a logical name such as ``jobs.default``)."""

    queue: str
    body: bytes
    headers: Mapping[str, str] = field(default_factory=dict)
    not_before: datetime | None = None
    id: uuid.UUID = field(default_factory=new_id)

    @property
    def message_id(self) -> str:
        """The id the message is published under: its own, or for a dead letter the id
        of the message that died."""
        return self.headers.get(HEADER_MESSAGE_ID) or str(self.id)


class MalformedMessageError(ValueError):
    """The bytes are not a job message this platform can run."""


# One encoder for every message: ``json.dumps`` with options makes a new one each time.
_COMPACT = json.JSONEncoder(separators=(",", ":"))


class EnvelopePublisher(Protocol):
    async def publish(self, envelope: Envelope) -> None:
        """Publish and wait for the broker's confirmation; raise BrokerUnavailableError."""
        ...

    async def publish_many(
        self, envelopes: Sequence[Envelope], timeout_s: float | None = None
    ) -> Sequence[BaseException | None]:
        """Publish `envelopes` in order and wait for the broker's confirmation of each,
        `timeout_s` at most (None: as long as one `publish` may take). Each one's
        outcome: None when confirmed, else the exception its `publish` would have
        raised (a TimeoutError when its confirm came too late)."""
        ...


async def publish_side_by_side(
    publish: Callable[[Envelope], Awaitable[None]],
    envelopes: Sequence[Envelope],
    timeout_s: float | None = None,
) -> list[BaseException | None]:
    """`publish_many` for a publisher that publishes one envelope a call: each call
    started in order, all awaited together, `timeout_s` at most."""
    calls = [asyncio.ensure_future(publish(envelope)) for envelope in envelopes]
    if not calls:
        return []
    try:
        _, late = await asyncio.wait(calls, timeout=timeout_s)
    finally:
        for call in calls:
            call.cancel()  # those still waiting (all, if this was cancelled)
    return [TimeoutError("no confirm in time") if call in late else _ended(call) for call in calls]


def _ended(call: "asyncio.Future[None]") -> BaseException | None:
    return asyncio.CancelledError() if call.cancelled() else call.exception()


class MessagePublisher:
    """The job core's `Publisher`: each message encoded, then published with a confirm."""

    def __init__(self, broker: EnvelopePublisher) -> None:
        self._broker = broker

    async def publish(self, message: Outgoing) -> None:
        await self._broker.publish(encode(message))

    async def send(self, messages: Sequence[Outgoing]) -> Sequence[BaseException | None]:
        """Publish `messages` in one write, each confirmed: None for each one sent, else
        its error (the dispatcher's ``Sender``)."""
        return await self._broker.publish_many([encode(message) for message in messages])


def encode(message: Outgoing) -> Envelope:
    """The envelope that carries `message`: a Taskiq message for the task named after
    the job type, whose only argument is the job id; a dead letter is the message that
    died, unchanged, with its reason in headers."""
    if isinstance(message, DeadLetterMessage):
        return _encode_dead_letter(message)
    labels: dict[str, Any] = {"queue_name": message.queue, "tenant_id": message.tenant_id}
    if message.not_before is not None:
        labels["not_before"] = message.not_before.timestamp()
    if message.deferrals:
        labels["deferrals"] = message.deferrals
    if message.prepaid:
        labels["prepaid"] = list(message.prepaid)
    if message.limit_keys is not None:
        labels["limit_keys"] = list(message.limit_keys)
    if message.outages:
        labels["outages"] = message.outages
    if message.waiting_since is not None:
        labels["waiting_since"] = message.waiting_since.timestamp()
    if message.deadline is not None:
        labels["deadline"] = message.deadline.timestamp()
    labels.update(message.trace_context)
    body: dict[str, Any] = {
        "task_id": message.message_id,
        "task_name": message.job_type,
        "labels": labels,
        "labels_types": None,
        "args": [],
        "kwargs": {"job_id": str(message.job_id)},
    }
    headers = {HEADER_JOB_ID: str(message.job_id), HEADER_TASK: message.job_type}
    try:
        envelope_id = uuid.UUID(message.message_id)
    except ValueError:
        # A delivery's own id, which its sender chose: published under it all the same.
        envelope_id = new_id()
        headers[HEADER_MESSAGE_ID] = message.message_id
    return Envelope(
        id=envelope_id,
        queue=message.queue,
        body=_COMPACT.encode(body).encode(),
        headers=headers,
        not_before=message.not_before,
    )


def _encode_dead_letter(letter: DeadLetterMessage) -> Envelope:
    died = encode(letter.message)
    return dead_letter(
        body=died.body,
        reason=letter.reason,
        source_queue=letter.source_queue,
        dead_letter_queue=letter.dead_letter_queue,
        at=letter.at,
        headers={HEADER_JOB_ID: str(letter.message.job_id), HEADER_TASK: letter.message.job_type},
        message_id=letter.message.message_id,
        job_failed_at=letter.job_failed_at,
        envelope_id=letter.id,
    )


def decode(body: bytes, *, default_queue: str = "") -> JobMessage:
    """Parse a job message strictly: JSON only, with a task name, a task id and exactly
    a job id for arguments, and labels of the types the worker reads."""
    try:
        # Decoded strictly first: json.loads(bytes) lets an encoded surrogate through.
        data = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise MalformedMessageError(f"body is not JSON: {exc}") from None
    except RecursionError:
        # Arrays or objects nested past Python's recursion limit (a 2.4 KB body does
        # it): a RuntimeError, which ended the queue's consumption.
        raise MalformedMessageError(
            "body is not JSON the worker reads: nested too deeply"
        ) from None
    if not isinstance(data, dict):
        raise MalformedMessageError("body is not a JSON object")
    if bytes_have_nul_escape(body):
        # Its ids and labels go into Postgres text columns, which cannot hold U+0000.
        raise MalformedMessageError("body holds a NUL character (U+0000)")
    if (b"\\ud" in body or b"\\uD" in body) and not _is_text(data):
        # A lone surrogate escape (\ud800) parses, but is no text: its message id could
        # not be a dead letter's, nor its labels be written to Postgres.
        raise MalformedMessageError("body holds a lone surrogate escape (not text)")
    if not isinstance(data.get("args", []), list):
        raise MalformedMessageError("labels or args have the wrong type")
    return from_parts(
        task_id=data.get("task_id"),
        task_name=data.get("task_name"),
        kwargs=data.get("kwargs"),
        labels=data.get("labels", {}),
        default_queue=default_queue,
    )


def _is_text(data: object) -> bool:
    try:
        json.dumps(data, ensure_ascii=False).encode()
    except UnicodeEncodeError:
        return False
    return True


def from_parts(
    *, task_id: object, task_name: object, kwargs: object, labels: object, default_queue: str
) -> JobMessage:
    """A job message from the parts of a Taskiq message (as `decode` reads them from the
    bytes, or as Taskiq's receiver parsed them). `default_queue`: the queue of a message
    that does not name one."""
    if not isinstance(task_name, str) or not task_name:
        raise MalformedMessageError("task_name is missing")
    if not isinstance(task_id, str) or not task_id:
        raise MalformedMessageError("task_id is missing")
    if not task_id.isprintable():
        raise MalformedMessageError("task_id is not printable text")
    if not isinstance(labels, dict):
        raise MalformedMessageError("labels or args have the wrong type")
    if not isinstance(kwargs, dict) or set(kwargs) != {"job_id"}:
        raise MalformedMessageError("kwargs must be exactly {job_id}")
    try:
        job_id = JobId(uuid.UUID(str(kwargs["job_id"])))
    except ValueError:
        raise MalformedMessageError("job_id is not a UUID") from None
    _check_labels(labels)
    not_before = labels.get("not_before")
    waiting_since = labels.get("waiting_since")
    limit_keys = labels.get("limit_keys")
    return JobMessage(
        job_id=job_id,
        job_type=task_name,
        queue=str(labels.get("queue_name") or default_queue),
        tenant_id=str(labels.get("tenant_id") or ""),
        message_id=task_id,
        deferrals=labels.get("deferrals") or 0,
        outages=labels.get("outages") or 0,
        not_before=_time("not_before", not_before),
        waiting_since=_time("waiting_since", waiting_since),
        deadline=_time("deadline", labels.get("deadline")),
        prepaid=tuple(labels.get("prepaid") or ()),
        limit_keys=None if limit_keys is None else tuple(limit_keys),
        trace_context={
            key: value
            for key in ("traceparent", "tracestate")
            if isinstance(value := labels.get(key), str)
        },
    )


# The task a worker runs a job message with when it has no task of the job's type.
UNKNOWN_TYPE_TASK = "jobrail.unknown_type"
UNKNOWN_TYPE_LABEL = "unknown_job_type"


def reroute_unknown_type(body: bytes, job_type: str) -> bytes:
    """The message, addressed to `UNKNOWN_TYPE_TASK` instead, the type it named kept in
    a label: the worker then fails that job with the reason, instead of leaving it
    pending with its message parked (see jobrail.transport.tasks)."""
    data = json.loads(body)
    data["task_name"] = UNKNOWN_TYPE_TASK
    data["labels"] = {**data.get("labels", {}), UNKNOWN_TYPE_LABEL: job_type}
    return _COMPACT.encode(data).encode()


def _check_labels(labels: Mapping[str, Any]) -> None:
    """The labels the worker reads must have the types it expects."""
    for name, wanted, ok in (
        ("tenant_id", "a string", lambda v: isinstance(v, str)),
        ("queue_name", "a string", lambda v: isinstance(v, str)),
        ("deferrals", "a whole number >= 0", lambda v: type(v) is int and v >= 0),
        ("outages", "a whole number >= 0", lambda v: type(v) is int and v >= 0),
        ("not_before", "a number", lambda v: type(v) in (int, float)),
        ("waiting_since", "a number", lambda v: type(v) in (int, float)),
        ("deadline", "a number", lambda v: type(v) in (int, float)),
        ("prepaid", "a list of strings", _strings),
        ("limit_keys", "a list of strings", _strings),
    ):
        if name in labels and labels[name] is not None and not ok(labels[name]):
            raise MalformedMessageError(f"label {name} must be {wanted}")


def _time(label: str, value: float | None) -> datetime | None:
    """A label's Unix time as a datetime; one no datetime can hold (NaN, infinite, out
    of range) makes the message malformed."""
    if value is None:
        return None
    try:
        return datetime.fromtimestamp(value, UTC)
    except (ValueError, OverflowError, OSError):
        raise MalformedMessageError(f"label {label} is not a time") from None


def _strings(value: object) -> bool:
    return isinstance(value, list) and all(isinstance(item, str) for item in value)


def dead_letter(
    *,
    body: bytes,
    reason: str,
    source_queue: str,
    dead_letter_queue: str,
    at: datetime,
    headers: Mapping[str, str] | None = None,
    message_id: str | None = None,
    job_failed_at: datetime | None = None,
    envelope_id: uuid.UUID | None = None,
) -> Envelope:
    """The original message, unchanged, addressed to the dead-letter queue with its reason
    and, when known, the id it had (`message_id`). `job_failed_at`: the letter records
    the failure of its job that ended then."""
    extra = {HEADER_MESSAGE_ID: message_id} if message_id else {}
    if job_failed_at is not None:
        extra[HEADER_JOB_FAILED_AT] = job_failed_at.isoformat()
    return Envelope(
        id=envelope_id or new_id(),
        queue=dead_letter_queue,
        body=body,
        headers={
            **(headers or {}),
            HEADER_REASON: reason[:1000],
            HEADER_SOURCE_QUEUE: source_queue,
            HEADER_DEAD_AT: at.isoformat(),
            **extra,
        },
    )


def describe_dead_letter(message_id: str, body: bytes, headers: Mapping[str, object]) -> DeadLetter:
    try:
        parsed: JobMessage | None = decode(body)
    except MalformedMessageError:
        parsed = None
    return DeadLetter(
        id=message_id,
        reason=str(headers.get(HEADER_REASON, "")),
        source_queue=str(headers.get(HEADER_SOURCE_QUEUE, "")),
        dead_at=str(headers.get(HEADER_DEAD_AT, "")),
        job_id=parsed.job_id if parsed else None,
        job_type=parsed.job_type if parsed else None,
        tenant_id=parsed.tenant_id if parsed else None,
        preview="" if parsed else body[:200].decode("utf-8", "replace"),
        job_failed_at=_moment(headers.get(HEADER_JOB_FAILED_AT)),
    )


def _moment(value: object) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else None
