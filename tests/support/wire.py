"""The job messages' wire format as tests look at it: through the codec, plus the raw
labels and task name a Taskiq message carries."""

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from jobrail.jobs.messages import JobMessage
from jobrail.kernel.ids import JobId
from jobrail.transport.codec import Envelope, decode, encode


@dataclass(frozen=True, slots=True)
class WireMessage:
    message_id: str
    task_name: str
    job_id: JobId
    labels: Mapping[str, Any]


def parse_job_message(body: bytes) -> WireMessage:
    """The message as the codec reads it (strictly: MalformedMessageError), with its raw
    labels."""
    message = decode(body)
    data = json.loads(body)
    return WireMessage(
        message_id=message.message_id,
        task_name=data["task_name"],
        job_id=message.job_id,
        labels=data.get("labels", {}),
    )


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
    """A job message's envelope, as the codec makes it."""
    return encode(
        JobMessage(
            job_id=job_id,
            job_type=job_type,
            queue=queue,
            tenant_id=tenant_id,
            trace_context=dict(trace_context or {}),
            not_before=not_before,
            deferrals=deferrals,
            prepaid=tuple(prepaid),
            limit_keys=None if limit_keys is None else tuple(limit_keys),
            outages=outages,
        )
    )
