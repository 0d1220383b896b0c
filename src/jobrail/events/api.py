"""The job event feed over HTTP: Server-Sent Events to follow it, JSON pages to read it.

A request that accepts ``text/event-stream`` (as ``EventSource`` does) gets a stream: the
events after its ``Last-Event-ID`` (or ``after``), then each new one as it happens, with
a keep-alive comment every 15 seconds. Each SSE event's id is the event's place in the
feed, so a browser that reconnects resumes exactly where it stopped. Any other request
gets one JSON page and no waiting: of the tenant's feed, every event (`JobEventPage`);
of one job, its story (`JobStoryPage`), the lines its ops page shows: a job reports
progress several times a second, and a list of every event would show little else.

A job's own stream also says where the job stands while it waits to start, as
``GET /jobs/{id}``'s `waiting` does (its place in line moves with no event of its own):
SSE events named `waiting`, without an id (they are no events of the feed, and a resume
never replays them; ``EventSource.onmessage`` does not see them), whose data is a
`JobWaitingFrame`. One is sent when the stream starts if the job waits, then whenever
what it says changed, looked at every `PLACE_EVERY_S` while the job waits (a few
primary-key reads: the job, the pauses, its line's count, capped); and one with
`waiting` null once it no longer does.
"""

import asyncio
import logging
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Annotated, Any

from dishka.integrations.fastapi import DishkaRoute, FromDishka
from fastapi import APIRouter, Header, Query, Request, Response
from fastapi.responses import StreamingResponse
from fastapi.sse import format_sse_event
from pydantic import BaseModel, Field

from jobrail.events.feed import (
    START,
    EventCursor,
    EventFilter,
    JobEvent,
    StoryLine,
    event_document,
    story_document,
)
from jobrail.events.use_cases import MAX_PAGE, JobEvents
from jobrail.http.auth import CurrentTenant
from jobrail.http.errors import ERROR_RESPONSES, JsonErrorsRoute
from jobrail.http.guard import is_head
from jobrail.http.rate_limits import RateLimitedError, RateLimitRead
from jobrail.jobs.domain import CLAIMABLE_STATUSES, JobStatus
from jobrail.jobs.get import GetJob, GetJobQuery
from jobrail.jobs.schemas import JobEventOut, JobEventPage, JobStatusName
from jobrail.jobs.waiting_out import PausedByOut, WaitingOut
from jobrail.kernel.errors import InvalidInputError, NotFoundError, StoreUnavailableError
from jobrail.kernel.ids import JobId, TenantId

log = logging.getLogger("jobrail.api.events")

HEARTBEAT_S = 15.0
# How often a job's own stream looks again where its job stands while it waits.
PLACE_EVERY_S = 2.0
# How long a browser waits before it reconnects after the stream broke (SSE `retry`).
RECONNECT_MS = 2000


class StoryLineOut(JobEventOut):
    """A line of a job's story: an event, or a run of progress events folded into its
    newest."""

    folded: int | None = Field(
        description="progress: how many progress events the line stands for (the newest "
        "one's, shown, and those since the event before it); null for the other events."
    )


class JobStoryPage(BaseModel):
    items: list[StoryLineOut]
    last_event_id: str | None = Field(
        description="The last item's id (null if none): ask again with after=<it> for more."
    )


_STREAM_DOC: dict[str, Any] = {
    "description": "Server-Sent Events (each event's data is a JobEventOut) when the "
    "request accepts text/event-stream; otherwise one page of JSON.",
    "model": JobEventPage,
    "content": {"text/event-stream": {"schema": {"type": "string"}}},
}


STREAM_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "Server-Sent Events (each event's data is a JobEventOut) when the "
        "request accepts text/event-stream; otherwise one page of JSON, the job's "
        "progress events folded.",
        "model": JobStoryPage,
        "content": {"text/event-stream": {"schema": {"type": "string"}}},
    },
    204: {"description": "The job has ended; nothing follows."},
}


class JobWaitingFrame(BaseModel):
    """The data of a job stream's `waiting` frame: where the job stands now."""

    job_id: uuid.UUID
    status: JobStatusName
    waiting: WaitingOut | None = Field(description="As GET /jobs/{id} shows it.")
    paused: PausedByOut | None = Field(description="As GET /jobs/{id} shows it.")


class _Places:
    """The `waiting` frames of a job's own stream (see the module): where the job stands,
    read again at each look while the job waits and when an event says its status
    changed to a waiting one; an event saying it no longer waits sends `waiting` null
    (once) without a read."""

    def __init__(self, get: GetJob, query: GetJobQuery, status: JobStatus) -> None:
        self._get = get
        self._job = query
        self._status = status
        self._sent: JobWaitingFrame | None = None

    async def frame(self, event: JobEvent | None = None) -> bytes | None:
        """The frame to send after `event` (None: at a look), if what it says changed."""
        if event is not None:
            moved, self._status = event.status is not self._status, event.status
            if not moved:
                return None  # the next look sees what the event changed
        if self._status in CLAIMABLE_STATUSES:
            try:
                job = await self._get(self._job)
            except NotFoundError:
                return None  # deleted meanwhile (retention): its events say the rest
            standing = await self._get.standing_of(job)
            self._status = job.status
            frame = JobWaitingFrame(
                job_id=job.id,
                status=job.status.value,
                waiting=WaitingOut.of(standing) if standing else None,
                paused=PausedByOut.of(standing.pause if standing else None),
            )
        else:
            frame = JobWaitingFrame(
                job_id=self._job.job_id, status=self._status.value, waiting=None, paused=None
            )
        if frame.waiting is None and (self._sent is None or self._sent.waiting is None):
            return None  # it did not wait, and said so (or never said anything)
        if frame == self._sent:
            return None
        self._sent = frame
        return format_sse_event(event="waiting", data_str=frame.model_dump_json())


class EventsRoute(JsonErrorsRoute, DishkaRoute):
    """Answers its errors as JSON itself (as the jobs routes do)."""


router = APIRouter(tags=["events"], route_class=EventsRoute, responses=ERROR_RESPONSES)

LastEventId = Annotated[
    str | None,
    Header(
        max_length=64,
        description="Resume after this event (what EventSource sends when it reconnects).",
    ),
]
After = Annotated[
    str | None,
    Query(max_length=64, description="Read after this event id (as Last-Event-ID does)."),
]
Limit = Annotated[int, Query(ge=1, le=MAX_PAGE, description="A JSON page's size.")]


def _wants_stream(request: Request) -> bool:
    # HEAD is answered with a page's headers: a stream would hold the connection open
    # for a body that is never sent.
    return "text/event-stream" in request.headers.get("accept", "") and not is_head(request.scope)


def event_cursor(last_event_id: str | None, after: str | None) -> EventCursor | None:
    given = last_event_id or after
    return EventCursor.parse(given) if given else None


def _utc(since: datetime | None) -> datetime | None:
    if since is None:
        return None
    try:
        return since.replace(tzinfo=UTC) if since.tzinfo is None else since.astimezone(UTC)
    except (OverflowError, ValueError):
        raise InvalidInputError("since is not a time jobrail can compare with") from None


def _page(events: list[JobEvent]) -> JobEventPage:
    return JobEventPage(
        items=[JobEventOut.model_validate(event_document(e)) for e in events],
        last_event_id=str(events[-1].cursor) if events else None,
    )


def _story_page(lines: list[StoryLine]) -> JobStoryPage:
    return JobStoryPage(
        items=[StoryLineOut.model_validate(story_document(line)) for line in lines],
        last_event_id=str(lines[-1].event.cursor) if lines else None,
    )


async def _sse(
    feed: JobEvents, which: EventFilter, *, until_ended: bool, places: _Places | None = None
) -> AsyncIterator[bytes]:
    with feed.stream_slot(which.tenant_id or TenantId("")) as held:
        if not held:  # taken between the check and the stream's start: end at once
            return
        # Its place, at once: a client that loses the stream before its first event
        # reconnects with it (EventSource keeps an id from a frame without data).
        yield format_sse_event(retry=RECONNECT_MS, id=str(which.after))
        try:
            if places is not None and (frame := await places.frame()):
                yield frame
            # A job's stream wakes every PLACE_EVERY_S to look where its job stands;
            # its keep-alive comment is still sent every HEARTBEAT_S.
            every = HEARTBEAT_S if places is None else min(PLACE_EVERY_S, HEARTBEAT_S)
            loop = asyncio.get_running_loop()
            pinged = loop.time()
            async for item in feed.follow(which, heartbeat_s=every, until_ended=until_ended):
                if isinstance(item, EventCursor):  # a keep-alive, with the place read to
                    if loop.time() - pinged >= HEARTBEAT_S - every / 2:
                        pinged = loop.time()
                        yield format_sse_event(comment="ping", id=str(item))
                    if places is not None and (frame := await places.frame()):
                        yield frame
                    continue
                document = JobEventOut.model_validate(event_document(item))
                yield format_sse_event(data_str=document.model_dump_json(), id=str(item.cursor))
                if places is not None and (frame := await places.frame(item)):
                    yield frame
        except StoreUnavailableError as exc:
            # The client reconnects with its Last-Event-ID and loses nothing.
            log.warning("event stream ended: database unavailable (%s)", exc)
        except Exception:
            # Its headers are sent: no error answer is possible any more. End the stream
            # (the client reconnects and resumes) rather than leave it to the server.
            log.exception("event stream ended by an error")


def _stream(
    feed: JobEvents, which: EventFilter, *, until_ended: bool, places: _Places | None = None
) -> StreamingResponse:
    """The stream's response, or a 429 when the tenant holds its most streams already.
    The slot is held by the stream itself (released however it ends)."""
    with feed.stream_slot(which.tenant_id or TenantId("")) as free:
        if not free:
            raise RateLimitedError(
                429,
                "too many open event streams: a tenant may hold "
                f"{feed.max_streams_per_tenant} on one API process",
                headers={"Retry-After": "5"},
            )
    return StreamingResponse(
        _sse(feed, which, until_ended=until_ended, places=places),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


@router.get(
    "/events",
    summary="The tenant's job events",
    description="Every change of the tenant's jobs, in order. As a stream (Accept: "
    "text/event-stream) it starts after Last-Event-ID or `after`, else at `since`, else "
    "now, and follows; as JSON it returns one page starting after `after`, else at "
    "`since`, else at the oldest event kept.",
    dependencies=[RateLimitRead],
    responses={200: _STREAM_DOC},
)
async def events(
    request: Request,
    tenant: CurrentTenant,
    feed: FromDishka[JobEvents],
    last_event_id: LastEventId = None,
    after: After = None,
    since: Annotated[datetime | None, Query(description="Start at this time.")] = None,
    job_type: Annotated[
        str | None,
        Query(max_length=128, description="Only this job type's events; empty: every type."),
    ] = None,
    limit: Limit = 100,
) -> Response:
    cursor = event_cursor(last_event_id, after)
    job_type = job_type or None  # `?job_type=`, as a form sends a field left empty
    which = EventFilter(tenant, cursor or START, job_type=job_type, since=_utc(since))
    if _wants_stream(request):
        if cursor is None:
            which = EventFilter(
                tenant, await feed.start_at(which), job_type=job_type, since=which.since
            )
        else:
            await feed.refuse_unreached(cursor)
        return _stream(feed, which, until_ended=False)
    events = list(await feed.page(which, limit))
    if not events and cursor is not None:
        await feed.refuse_unreached(cursor)
    return Response(_page(events).model_dump_json(), media_type="application/json")


@router.get(
    "/jobs/{job_id}/events",
    summary="A job's events",
    description="Everything that happened to the job, in order. As a stream (Accept: "
    "text/event-stream) it starts after Last-Event-ID or `after` and ends once the job "
    "has ended; a stream asked for after a job's last event, once it has ended, is a 204 "
    "(which tells EventSource to stop reconnecting). As JSON it returns one page, as "
    "the ops page lists it: every event but progress, and each run of progress events "
    "between two others as one line, the newest, with `folded` saying how many it "
    "stands for.",
    dependencies=[RateLimitRead],
    responses=STREAM_RESPONSES,
)
async def job_events(
    job_id: uuid.UUID,
    request: Request,
    tenant: CurrentTenant,
    get: FromDishka[GetJob],
    feed: FromDishka[JobEvents],
    last_event_id: LastEventId = None,
    after: After = None,
    limit: Limit = 100,
) -> Response:
    return await job_events_response(
        request, tenant, JobId(job_id), get, feed, event_cursor(last_event_id, after), limit
    )


async def job_events_response(
    request: Request,
    tenant: TenantId,
    job_id: JobId,
    get: GetJob,
    feed: JobEvents,
    cursor: EventCursor | None,
    limit: int,
) -> Response:
    """GET /jobs/{id}/events's answer (JobRail.router serves it too)."""
    job = await get(GetJobQuery(tenant_id=tenant, job_id=job_id))
    which = EventFilter(tenant, cursor or START, job_id=job.id)
    if not _wants_stream(request):
        lines = list(await feed.story(which, limit))
        if not lines and cursor is not None:
            await feed.refuse_unreached(cursor)
        return Response(_story_page(lines).model_dump_json(), media_type="application/json")
    if cursor is not None:
        # Before the 204: an id past the feed is the 422 it is for a JSON page, not the
        # end of a job's story.
        await feed.refuse_unreached(cursor)
    if job.status.is_terminal and not await feed.page(which, 1):
        # Nothing follows only if the job's last event, written, is one this client has
        # (it may be written and not handed out yet: then the stream waits for it).
        last = await feed.last_of_job(job.id)
        if last is None or (last.ends_job and last.cursor <= which.after):
            return Response(status_code=204)
    places = _Places(get, GetJobQuery(tenant, job.id), job.status)
    return _stream(feed, which, until_ended=True, places=places)
