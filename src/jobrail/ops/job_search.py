"""The console's job list: every tenant's jobs, newest first, filtered by status, type,
tenant, entity (within a tenant), queue and creation time, or found by id or key, a page
at a time.

Pages go by keyset (created_at, id), never by offset: the next page starts after the
last job shown, whatever was enqueued since, and each page reads at most one page of
rows from an index (jobrail.ops.persistence says which index serves which filter)."""

import base64
import binascii
import uuid
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Protocol

from jobrail.jobs.domain import Job, JobStatus
from jobrail.jobs.ports import Cursor
from jobrail.kernel.errors import InvalidInputError
from jobrail.kernel.ids import JobId

PAGE_SIZE = 50
MAX_TEXT = 255  # the longest key or name a filter may hold (the columns' length)


@dataclass(frozen=True, slots=True)
class JobSearchFilter:
    status: JobStatus | None = None
    type: str | None = None
    tenant_id: str | None = None
    entity_id: str | None = None
    """Only with `tenant_id`: an entity id names something of one tenant's."""
    queue: str | None = None
    created_from: datetime | None = None
    """Created at or after."""
    created_to: datetime | None = None
    """Created before."""
    job_id: JobId | None = None
    key: str | None = None
    """An idempotency key or a unique key."""


@dataclass(frozen=True, slots=True)
class JobSearchPage:
    items: list[Job]
    next_cursor: str | None
    """Where the next page starts (opaque); None on the last page."""


class JobSearch(Protocol):
    async def search(self, where: JobSearchFilter, limit: int, after: Cursor | None) -> list[Job]:
        """Up to `limit` jobs matching `where`, newest first (created_at, then id, both
        descending), after `after` in that order."""
        ...


@dataclass(frozen=True, slots=True)
class SearchJobsQuery:
    """The list's query string as given: every field text, checked by `SearchJobs`."""

    status: str = ""
    type: str = ""
    tenant: str = ""
    queue: str = ""
    created_from: str = ""
    created_to: str = ""
    q: str = ""
    """A job id, an idempotency key or a unique key."""
    cursor: str = ""
    entity: str = ""


class SearchJobs:
    """A page of every tenant's jobs for operators.

    - an entity needs a tenant (entity ids are a tenant's own, and the index that finds
      them starts with the tenant);
    - status is one of the job statuses; times are ISO 8601 (a time without a zone is
      UTC), `created_from` before `created_to`; text filters at most 255 characters;
      a cursor is one this list gave. Anything else is an `InvalidInputError`.
    - `q` that is a UUID finds that job; any other `q` the jobs with that idempotency
      key or unique key.
    """

    def __init__(self, jobs: JobSearch) -> None:
        self._jobs = jobs

    async def __call__(self, query: SearchJobsQuery) -> JobSearchPage:
        where = filter_of(query)
        after = decode_cursor(query.cursor) if query.cursor.strip() else None
        found = await self._jobs.search(where, PAGE_SIZE + 1, after)
        items = found[:PAGE_SIZE]
        more = len(found) > PAGE_SIZE
        return JobSearchPage(items, encode_cursor(items[-1]) if more else None)


def filter_of(query: SearchJobsQuery) -> JobSearchFilter:
    where = JobSearchFilter(
        status=_status(query.status.strip()),
        type=_text(query.type, "type"),
        tenant_id=_text(query.tenant, "tenant"),
        entity_id=_text(query.entity, "entity"),
        queue=_text(query.queue, "queue"),
        created_from=_time(query.created_from, "created_from"),
        created_to=_time(query.created_to, "created_to"),
    )
    if where.entity_id is not None and where.tenant_id is None:
        raise InvalidInputError("an entity is a tenant's: give the tenant too")
    if where.created_from and where.created_to and where.created_from >= where.created_to:
        raise InvalidInputError("created_from must be before created_to")
    q = _text(query.q, "q")
    if q is None:
        return where
    try:
        return replace(where, job_id=JobId(uuid.UUID(q)))
    except ValueError:
        return replace(where, key=q)


def _status(text: str) -> JobStatus | None:
    if not text:
        return None
    try:
        return JobStatus(text)
    except ValueError:
        names = ", ".join(s.value for s in JobStatus)
        raise InvalidInputError(f"status is one of {names}, not {text[:40]!r}") from None


def _text(text: str, name: str) -> str | None:
    text = text.strip()
    if len(text) > MAX_TEXT or "\x00" in text:
        raise InvalidInputError(f"{name} is at most {MAX_TEXT} characters of text")
    return text or None


def _time(text: str, name: str) -> datetime | None:
    text = text.strip()
    if not text:
        return None
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise InvalidInputError(
            f"{name} is a time such as 2026-12-06T14:00 or 2026-12-06, not {text[:40]!r}"
        ) from None
    return when.replace(tzinfo=UTC) if when.tzinfo is None else when.astimezone(UTC)


def encode_cursor(job: Job) -> str:
    return cursor_text(Cursor(created_at=job.created_at, job_id=job.id))


def cursor_text(cursor: Cursor) -> str:
    """The opaque text of a position in a newest-first list (`decode_cursor` reads it)."""
    raw = f"{cursor.created_at.astimezone(UTC).isoformat()}|{cursor.job_id}".encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(text: str) -> Cursor:
    try:
        raw = base64.urlsafe_b64decode(text.strip() + "=" * (-len(text.strip()) % 4))
        at, sep, job_id = raw.decode().partition("|")
        created_at = datetime.fromisoformat(at)
        if not sep or created_at.tzinfo is None:
            raise ValueError(text)
        return Cursor(created_at=created_at, job_id=JobId(uuid.UUID(job_id)))
    except (ValueError, UnicodeDecodeError, binascii.Error):
        raise InvalidInputError("that is not a cursor this list gave") from None
