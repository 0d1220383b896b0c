"""What a job's console page shows beyond the job itself: its story as lines of text
(the lines of ``GET /jobs/{id}/events``: lifecycle events, each run of progress folded
into its newest), and its attempts as its events tell them."""

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from jobrail.events.feed import JobEvent, StoryLine
from jobrail.jobs.domain import Wait
from jobrail.ops.page_parts import progress_text, when
from jobrail.worker.failures import AttemptFailure

# The worker's clock stamps a failure, the database's an event: a little either way.
_SKEW = timedelta(seconds=5)

# The events that end an attempt, and what each says of it.
_ATTEMPT_ENDS = {
    "retrying": "failed, retried",
    "failed": "failed",
    "succeeded": "succeeded",
    "cancelled": "cancelled",
    "deferred": "turned away by its limits",
    "expired": "expired",
}


@dataclass(slots=True)
class Attempt:
    number: int
    started_at: datetime
    ended_at: datetime | None = None
    outcome: str = "running"
    error: str = ""
    traceback: str = ""


def attempts_of(lines: list[StoryLine], failures: Sequence[AttemptFailure] = ()) -> list[Attempt]:
    """Each attempt its events show: from its `started` to the event that ended it,
    with that event's error (a retried or failed attempt's) and the traceback noted of
    it (`failures`: the first of that attempt number noted since it started; a redrive
    numbers attempts from 1 again)."""
    found: list[Attempt] = []
    for line in lines:
        event = line.event
        if event.name == "started":
            found.append(Attempt(event.attempts, event.at))
        elif event.name in _ATTEMPT_ENDS and found and found[-1].ended_at is None:
            attempt = found[-1]
            attempt.ended_at = event.at
            attempt.outcome = _ATTEMPT_ENDS[event.name]
            if event.name in ("retrying", "failed", "cancelled"):
                attempt.error = event.last_error or ""
    unused = list(failures)
    for attempt in found:
        match = next(
            (
                f
                for f in unused
                if f.attempt == attempt.number and f.at >= attempt.started_at - _SKEW
            ),
            None,
        )
        if match is not None and attempt.error:
            unused.remove(match)
            attempt.traceback = match.traceback
    return found


def line_details(line: StoryLine) -> str:
    details = _event_details(line.event)
    if line.folded is not None and line.folded > 1:
        return f"{details} (the newest of {line.folded})"
    return details


def _event_details(event: JobEvent) -> str:
    """What the event says beyond the job's status: how far it got, what it waits for,
    or its error."""
    error = (event.last_error or "")[:300]
    if event.name == "progress":
        return progress_text(event.progress)
    if event.name == "deferred" and event.waiting is not None:
        return _wait(event.waiting)
    if event.name == "retrying":
        return f"next attempt {when(event.run_after)}: {error}"
    if event.name in ("failed", "cancelled"):
        return error
    return ""


def _wait(wait: Wait) -> str:
    on = ", ".join(f"{w.kind} {w.name} ({w.key})" for w in wait.on)
    return f"waits for {on} until {when(wait.until)}"
