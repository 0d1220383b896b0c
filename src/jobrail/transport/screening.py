"""What a consumer does with a delivery before Taskiq sees it: one decision, two brokers.

A delivery is decoded once. A job message of a type this worker has a task for runs as
it came; one of a type it has no task for runs as the unknown-type task, which fails
the job with why (Taskiq itself would log and drop it); anything else is refused with
its reason, for the consumer to dead-letter. Each consumer only does its transport's
part with the verdict (acknowledge, put back, start the task).
"""

import logging
from collections.abc import Callable
from dataclasses import dataclass

from pydantic import ConfigDict
from taskiq import AckableMessage

from jobrail.jobs.messages import JobMessage
from jobrail.transport.codec import (
    UNKNOWN_TYPE_TASK,
    MalformedMessageError,
    decode,
    reroute_unknown_type,
)

log = logging.getLogger("jobrail.broker")


@dataclass(frozen=True, slots=True)
class Run:
    """Hand `body` to Taskiq (the delivery's own, or its reroute to the unknown-type task)."""

    body: bytes
    message: JobMessage


class ScreenedMessage(AckableMessage):
    """A delivery Taskiq may run, with the job message it was decoded into (so that the
    worker's receiver does not decode it again)."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    job: JobMessage


@dataclass(frozen=True, slots=True)
class Refuse:
    """Not something this worker can run: dead-letter it with `reason`."""

    reason: str


def screen(body: bytes, has_task: Callable[[str], bool]) -> Run | Refuse:
    """The verdict on one delivery; `has_task(name)` says whether a task of that name is
    registered here."""
    try:
        message = decode(body)
    except MalformedMessageError as exc:
        return Refuse(f"malformed message: {exc}")
    except Exception as exc:
        # A body the decoder did not foresee is still one message: dead-lettered, never
        # the end of its queue's consumption (the consumer's loop ends on RuntimeError).
        log.exception("a message could not be decoded")
        return Refuse(f"malformed message: it could not be decoded ({type(exc).__name__})")
    if has_task(message.job_type):
        return Run(body, message)
    if has_task(UNKNOWN_TYPE_TASK):
        return Run(reroute_unknown_type(body, message.job_type), message)
    return Refuse(f"unknown task {message.job_type!r}")
