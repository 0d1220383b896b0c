"""The job event feed: what happened to a tenant's jobs, in order, resumable.

Every change of a job a client may follow is an event (its names are `EVENT_NAMES`),
recorded in the transaction that made the change (jobrail.store.tables.job_events
says how). Each event has a cursor; reading after a cursor gives every later event once,
in order, whoever wrote them and however their transactions interleaved. GET /events
and GET /jobs/{id}/events serve the feed as Server-Sent Events (the cursor is the SSE
event id, so a client that reconnects with ``Last-Event-ID`` resumes where it stopped),
and jobrail.webhooks delivers it to a tenant's webhooks. Where a job's events are listed
(its JSON page, its ops page) they are its story (`StoryLine`): its progress reports
folded between the events that say what happened to it.
"""

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from jobrail.jobs.domain import JobStatus, Wait
from jobrail.jobs.progress import JobProgress
from jobrail.kernel.errors import InvalidInputError
from jobrail.kernel.ids import JobId, TenantId

EVENT_NAMES = (
    "enqueued",
    "started",
    "progress",
    "deferred",
    "retrying",
    "succeeded",
    "failed",
    "cancelled",
    "expired",
    "released",
    "redriven",
)
"""enqueued: the job was written (pending, or blocked in a flow); started: an attempt
claimed it; progress: the attempt reported how far it got; deferred: a limit or lock
turned it away (its `waiting` says what and until when); retrying: an attempt failed,
or a vendor's 429 (ThrottledError) asked it to wait, and it runs again later;
succeeded, failed, cancelled: it ended; expired: its deadline passed before it could
start, and it never ran; released: a flow released a blocked job;
redriven: an operator ran a failed or cancelled job again. A job whose worker was lost
is taken over by another: that shows as its next `started`."""

ENDED = frozenset({"succeeded", "failed", "cancelled", "expired"})

FOLDED = "progress"
"""The event a job's story folds (`StoryLine`): an attempt reports its progress several
times a second, which would push the events that say what happened out of any list."""


@dataclass(frozen=True, slots=True, order=True)
class EventCursor:
    """A position in the feed: the writing transaction's order (0 on SQLite), then the
    event's id. Written ``"<tx>-<id>"``."""

    tx: int
    id: int

    def __str__(self) -> str:
        return f"{self.tx}-{self.id}"

    @classmethod
    def parse(cls, text: str) -> "EventCursor":
        tx, sep, id_ = text.strip().partition("-")
        if sep and tx.isascii() and tx.isdigit() and id_.isascii() and id_.isdigit():
            cursor = cls(int(tx), int(id_))
            if cursor.tx < 2**63 and cursor.id < 2**63:  # the columns are 64-bit
                return cursor
        raise InvalidInputError(
            f"{text[:60]!r} is not an event id (they look like 123-456: take one from an "
            "event's id)"
        )


START = EventCursor(0, 0)


@dataclass(frozen=True, slots=True)
class JobEvent:
    cursor: EventCursor
    name: str
    tenant_id: TenantId
    job_id: JobId
    job_type: str
    at: datetime
    # The job as the change left it.
    status: JobStatus
    attempts: int
    last_error: str | None
    run_after: datetime | None
    progress: JobProgress | None
    waiting: Wait | None
    flow_id: uuid.UUID | None

    @property
    def ends_job(self) -> bool:
        return self.name in ENDED


@dataclass(frozen=True, slots=True)
class StoryLine:
    """A line of a job's story, the list of its events a page shows: each event but
    progress as it is, and each run of progress events (those between two other events,
    or before or after them) as its newest, standing for the `folded` of them."""

    event: JobEvent
    folded: int | None = None
    """How many progress events the line stands for (its own included); None for the
    other events, which are never folded."""


@dataclass(frozen=True, slots=True)
class EventFilter:
    """Which events to read: one tenant's (None: every tenant's, for the webhook relay),
    after `after`, optionally of one job or one job type, or since a time."""

    tenant_id: TenantId | None
    after: EventCursor = START
    job_id: JobId | None = None
    job_type: str | None = None
    since: datetime | None = None


class JobEventLog(Protocol):
    async def read(self, which: EventFilter, limit: int) -> Sequence[JobEvent]:
        """At most `limit` events matching `which`, in feed order. Only events no open
        transaction can still precede are read, so none ever appears behind a cursor
        already read."""
        ...

    async def head(self) -> EventCursor:
        """A cursor after every event that can be read now: reading after it gives only
        what happens from here on."""
        ...

    async def tip(self) -> EventCursor:
        """The cursor of the last event that can be read now, of any tenant (START when
        there is none): reading after a cursor at or past it finds nothing, until the
        tip moves on. New events only move it forward (retention takes it back to START
        when it deletes every event)."""
        ...

    async def of_job(self, job_id: JobId, limit: int) -> Sequence[JobEvent]:
        """The job's newest `limit` events (the last written), in feed order, for a look
        at its history: every one written, including those the feed holds back yet."""
        ...

    async def story(
        self, which: EventFilter, limit: int, *, held_back_too: bool = False
    ) -> Sequence[StoryLine]:
        """The first `limit` lines of the story of the job `which.job_id` (of the tenant
        `which.tenant_id`, if one is given) after `which.after`, in feed order (a run of
        progress events the cursor cuts stands for what is after it). The store folds
        the runs: a job's many progress events are never all read. `held_back_too`: also
        the events the feed holds back yet (a look at the history, as `of_job`, rather
        than a page to read on from)."""
        ...


def event_document(event: JobEvent) -> dict[str, object]:
    """An event as JSON, as GET /events and webhooks send it."""
    progress = event.progress
    return {
        "id": str(event.cursor),
        "event": event.name,
        "job_id": str(event.job_id),
        "job_type": event.job_type,
        "at": event.at.isoformat(),
        "status": event.status.value,
        "attempts": event.attempts,
        "last_error": event.last_error,
        "run_after": event.run_after.isoformat() if event.run_after else None,
        "progress": None
        if progress is None
        else {
            "current": progress.current,
            "total": progress.total,
            "message": progress.message,
            "updated_at": progress.updated_at.isoformat(),
        },
        "waiting": None if event.waiting is None else event.waiting.as_json(),
        "flow_id": str(event.flow_id) if event.flow_id else None,
    }


def story_document(line: StoryLine) -> dict[str, object]:
    """A line of a job's story as JSON: its event's document, and how many progress
    events it stands for."""
    return {**event_document(line.event), "folded": line.folded}
