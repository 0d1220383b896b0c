"""Messages as they travel: an envelope per message, and the job message format.

A job message is a Taskiq message (JSON) for the task named after the job type,
whose only argument is the job id. The job row, not the message, holds the
payload: a message is a pointer to work, never the work itself.
"""

import json
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

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


@dataclass(frozen=True, slots=True)
class JobMessage:
    """What a worker needs from a delivered job message."""

    message_id: str
    task_name: str
    job_id: JobId
    labels: Mapping[str, Any]


class MalformedMessageError(ValueError):
    """The bytes are not a job message this platform can run."""


def job_envelope(
    *,
    job_id: JobId,
    job_type: str,
    queue: str,
    tenant_id: str,
    trace_context: Mapping[str, str] | None = None,
    not_before: datetime | None = None,
    deferrals: int = 0,
    prepaid: Sequence[str] = (),
    limit_keys: Sequence[str] | None = None,
    outages: int = 0,
) -> Envelope:
    """A job message. `not_before` also travels in the labels, so that a worker can tell
    a message that came back early from a delay tier; `prepaid` lists the token buckets
    whose token was reserved for this job (``jobrail.limits.gate.reservation``);
    `outages` counts its deferrals in a row while the limits store was unreachable."""
    message_id = new_id()
    labels: dict[str, Any] = {"queue_name": queue, "tenant_id": tenant_id}
    if not_before is not None:
        labels["not_before"] = not_before.timestamp()
    if deferrals:
        labels["deferrals"] = deferrals
    if prepaid:
        labels["prepaid"] = list(prepaid)
    if limit_keys is not None:
        labels["limit_keys"] = list(limit_keys)
    if outages:
        labels["outages"] = outages
    labels.update(trace_context or {})
    body: dict[str, Any] = {
        "task_id": str(message_id),
        "task_name": job_type,
        "labels": labels,
        "labels_types": None,
        "args": [],
        "kwargs": {"job_id": str(job_id)},
    }
    return Envelope(
        id=message_id,
        queue=queue,
        body=json.dumps(body, separators=(",", ":")).encode(),
        headers={HEADER_JOB_ID: str(job_id), HEADER_TASK: job_type},
        not_before=not_before,
    )


def parse_job_message(body: bytes) -> JobMessage:
    """Parse a job message strictly: JSON only, with a task name and a job id."""
    try:
        data = json.loads(body)
    except (UnicodeDecodeError, ValueError) as exc:
        raise MalformedMessageError(f"body is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise MalformedMessageError("body is not a JSON object")
    if bytes_have_nul_escape(body):
        # Its ids and labels go into Postgres text columns, which cannot hold U+0000.
        raise MalformedMessageError("body holds a NUL character (U+0000)")
    task_name = data.get("task_name")
    task_id = data.get("task_id")
    kwargs = data.get("kwargs")
    labels = data.get("labels", {})
    if not isinstance(task_name, str) or not task_name:
        raise MalformedMessageError("task_name is missing")
    if not isinstance(task_id, str) or not task_id:
        raise MalformedMessageError("task_id is missing")
    if not isinstance(labels, dict) or not isinstance(data.get("args", []), list):
        raise MalformedMessageError("labels or args have the wrong type")
    if not isinstance(kwargs, dict) or set(kwargs) != {"job_id"}:
        raise MalformedMessageError("kwargs must be exactly {job_id}")
    try:
        job_id = JobId(uuid.UUID(str(kwargs["job_id"])))
    except ValueError:
        raise MalformedMessageError("job_id is not a UUID") from None
    _check_labels(labels)
    return JobMessage(message_id=task_id, task_name=task_name, job_id=job_id, labels=labels)


# The task a worker runs a job message with when it has no task of the job's type.
UNKNOWN_TYPE_TASK = "jobrail.unknown_type"
UNKNOWN_TYPE_LABEL = "unknown_job_type"


def reroute_unknown_type(body: bytes, job_type: str) -> bytes:
    """The message, addressed to `UNKNOWN_TYPE_TASK` instead, the type it named kept in
    a label: the worker then fails that job with the reason, instead of leaving it
    pending with its message parked (see jobrail.messaging.tasks)."""
    data = json.loads(body)
    data["task_name"] = UNKNOWN_TYPE_TASK
    data["labels"] = {**data.get("labels", {}), UNKNOWN_TYPE_LABEL: job_type}
    return json.dumps(data, separators=(",", ":")).encode()


def _check_labels(labels: Mapping[str, Any]) -> None:
    """The labels the worker reads must have the types it expects."""
    for name, wanted, ok in (
        ("tenant_id", "a string", lambda v: isinstance(v, str)),
        ("queue_name", "a string", lambda v: isinstance(v, str)),
        ("deferrals", "a whole number >= 0", lambda v: type(v) is int and v >= 0),
        ("outages", "a whole number >= 0", lambda v: type(v) is int and v >= 0),
        ("not_before", "a number", lambda v: type(v) in (int, float)),
        ("prepaid", "a list of strings", _strings),
        ("limit_keys", "a list of strings", _strings),
    ):
        if name in labels and labels[name] is not None and not ok(labels[name]):
            raise MalformedMessageError(f"label {name} must be {wanted}")


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
) -> Envelope:
    """The original message, unchanged, addressed to the dead-letter queue with its reason
    and, when known, the id it had (`message_id`). `job_failed_at`: the letter records
    the failure of its job that ended then."""
    extra = {HEADER_MESSAGE_ID: message_id} if message_id else {}
    if job_failed_at is not None:
        extra[HEADER_JOB_FAILED_AT] = job_failed_at.isoformat()
    return Envelope(
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


def with_task_id(body: bytes, task_id: str) -> bytes:
    """A job message's body under another task id: a dead letter made again from its
    job carries the id of the message that died, inside as well as outside."""
    data = json.loads(body)
    data["task_id"] = task_id
    return json.dumps(data, separators=(",", ":")).encode()


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """A message in the dead-letter queue, as operators see it."""

    id: str
    reason: str
    source_queue: str
    dead_at: str
    job_id: JobId | None
    """None when the message is not a job message (malformed, pickled, ...)."""
    job_type: str | None
    tenant_id: str | None
    preview: str
    """The start of the body of a message that is not a job message, else ''."""
    job_failed_at: datetime | None = None
    """For the letter of a failed job: the job's finished_at when it failed."""


def describe_dead_letter(message_id: str, body: bytes, headers: Mapping[str, object]) -> DeadLetter:
    try:
        parsed: JobMessage | None = parse_job_message(body)
    except MalformedMessageError:
        parsed = None
    return DeadLetter(
        id=message_id,
        reason=str(headers.get(HEADER_REASON, "")),
        source_queue=str(headers.get(HEADER_SOURCE_QUEUE, "")),
        dead_at=str(headers.get(HEADER_DEAD_AT, "")),
        job_id=parsed.job_id if parsed else None,
        job_type=parsed.task_name if parsed else None,
        tenant_id=str(parsed.labels.get("tenant_id", "")) if parsed else None,
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
