"""The job store's statements, each defined once, in SQLAlchemy Core: what a claim may
take, what a record may write and while which attempt holds the job, a lease's
extension, a progress write, a cancel request's read, wait notes, an enqueue with its
idempotency key.

The SQLAlchemy store (``store/jobs.py``) runs these statements as they are, on SQLite
and Postgres. The Postgres hot path (``store/pg_job_store.py``, ``store/pg_intake.py``)
runs their text, compiled once for asyncpg at import (``store/pg_queries.py``). The
statements that write many jobs at once (one ``unnest`` row per job, and the enqueue's
single statement for jobs and messages) are Postgres's alone, but they are built here
from the same conditions and column lists: a rule changed here changes every path.

A condition or a statement takes its values from a ``Values``: bind parameters (one job
per execution) or the columns of an ``unnest`` of array parameters (one job per row),
named alike, so that a statement for one job and its many-jobs twin take the same
parameters. Constants are literals, never bound: the compiled text has exactly the
parameters its callers pass.
"""

from collections.abc import Collection, Mapping
from typing import Any

from sqlalchemy import (
    ARRAY,
    ColumnElement,
    Integer,
    LargeBinary,
    Select,
    String,
    Text,
    Update,
    Uuid,
    and_,
    bindparam,
    cast,
    column,
    exists,
    func,
    insert,
    literal_column,
    null,
    or_,
    select,
    update,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.types import TypeEngine

from jobrail.jobs.domain import CLAIMABLE_STATUSES, EXPIRED_ERROR, FlowRole, JobStatus
from jobrail.store.dialects import (
    keyed,
    paused_job,
)
from jobrail.store.tables import Json, UtcDateTime, flows, jobs, outbox

Types = Mapping[str, TypeEngine[Any]]
Values = Mapping[str, Any]
"""A statement's named values: bind parameters, or the columns of an unnest."""


def bound(types: Types) -> Values:
    """One bind parameter per name: the statement reads or writes one job."""
    return {name: bindparam(name, type_=type_) for name, type_ in types.items()}


def unnested(
    alias: str,
    types: Types,
    *,
    prefix: str = "",
    json_text: Collection[str] = (),
    ordinality: str | None = None,
) -> Values:
    """One array parameter per name (called `prefix` + name), unnested together into
    the rows of `alias`, each row one job (Postgres). The columns of `json_text` are sent
    as JSON text and read as jsonb, so that a document the codec refuses fails its own
    request before any statement runs. `ordinality`: a column of each row's place."""
    sent = {name: Text() if name in json_text else type_ for name, type_ in types.items()}
    rows = (
        func.unnest(*(bindparam(prefix + name, type_=ARRAY(t)) for name, t in sent.items()))
        .table_valued(*(column(name, t) for name, t in sent.items()), with_ordinality=ordinality)
        .render_derived(name=alias)
    )
    values: dict[str, Any] = {
        name: cast(rows.c[name], JSONB) if name in json_text else rows.c[name] for name in types
    }
    if ordinality is not None:
        values[ordinality] = rows.c[ordinality]
    return values


def _literal(value: str) -> ColumnElement[Any]:
    return literal_column(f"'{value}'", Text())


RUNNING = _literal(JobStatus.RUNNING.value)  # and below, in the statuses' own order:
CLAIMABLE = [_literal(status.value) for status in JobStatus if status in CLAIMABLE_STATUSES]

# What the end of an attempt writes (JobStore.record). cancel_requested belongs to
# whoever asked to cancel, the worker only reads it; `waiting` is NULL while a job runs.
RECORDED = (
    "status",
    "attempts",
    "last_error",
    "result",
    "updated_at",
    "started_at",
    "finished_at",
    "run_after",
    "lease_until",
)
# What an enqueue writes. A job enqueued alone belongs to no flow (batches and chains are
# written in a unit of work, jobrail.jobs.workflows), waits for nothing and has reported
# no progress.
# fmt: off
ENQUEUED = (
    "id", "tenant_id", "type", "queue", "status", "entity_id", "idempotency_key", "payload",
    "result", "attempts", "max_attempts", "last_error", "trace_context", "cancel_requested",
    "created_at", "updated_at", "started_at", "finished_at", "run_after", "lease_until",
    "deadline", "unique_key", "debounce_key", "held_since", "rank_at", "priority", "fair_key",
)
# fmt: on
assert {*ENQUEUED, "waiting", "progress", "flow_id", "flow_role", "flow_step"} == set(
    jobs.c.keys()
), "the jobs table changed: update ENQUEUED, and the enqueue's parameters (PgJobIntake)"
FLOW_ORDER = (jobs.c.flow_step, jobs.c.created_at, jobs.c.id)

# The parameters, by statement. Text, not the columns' VARCHAR(n): a cast to VARCHAR(n)
# would cut a long value short, where the column refuses it.
JOB: Types = {"job_id": Uuid()}
HELD: Types = {**JOB, "claimed_attempt": Integer(), "claimed_at": UtcDateTime()}
CLAIMING: Types = {
    **JOB,
    "now": UtcDateTime(),
    "lease_until": UtcDateTime(),
    "due_by": UtcDateTime(),
    # Named apart from the columns: an UPDATE's parameter named as a column would set it.
    "expect_tenant_id": Text(),
    "expect_job_type": Text(),
}
RECORDING: Types = {
    **HELD,
    "status": Text(),
    "attempts": Integer(),
    "last_error": Text(),
    "result": Json,
    "updated_at": UtcDateTime(),
    "started_at": UtcDateTime(),
    "finished_at": UtcDateTime(),
    "run_after": UtcDateTime(),
    "lease_until": UtcDateTime(),
}
assert set(RECORDING) == {*HELD, *RECORDED}
PROGRESS: Types = {**HELD, "progress": Json}
NOTE: Types = {**JOB, "waiting": Json, "at": UtcDateTime()}
KEY: Types = {"tenant_id": Text(), "idempotency_key": Text()}
UNIQUE: Types = {"tenant_id": Text(), "type": Text(), "unique_key": Text()}
EXPIRING: Types = {**JOB, "now": UtcDateTime()}
MESSAGE: Types = {
    "id": Uuid(),
    "queue": Text(),
    "body": LargeBinary(),
    "headers": Json,
    "not_before": UtcDateTime(),
    "created_at": UtcDateTime(),
}
MARK: Types = {"id": Uuid(), "at": UtcDateTime()}
ENQUEUING: Types = {
    name: Text() if isinstance(jobs.c[name].type, String) else jobs.c[name].type
    for name in ENQUEUED
}
CAPPED: Types = {**ENQUEUING, "cap_tenant_id": Text()}  # NULL: no cap (Job.capped)


# -- conditions


def claimable(v: Values) -> ColumnElement[bool]:
    """Job.can_start as a condition, and not paused: before its deadline, pending or
    retrying (released by the dispatcher, if it held the job) and due by
    `due_by` (now and DUE_TOLERANCE, see Job.is_due), or running on a lease that ended by
    `now`. `now` is the claiming worker's clock, as is the lease_until the holder wrote:
    workers' clocks must agree to within the renewal margin (see worker.runner)."""
    due = or_(jobs.c.run_after.is_(None), jobs.c.run_after <= v["due_by"])
    in_time = or_(jobs.c.deadline.is_(None), jobs.c.deadline > v["now"])
    waiting = and_(jobs.c.status.in_(CLAIMABLE), jobs.c.held_since.is_(None), due)
    return and_(in_time, or_(waiting, _abandoned(v)), ~paused_job())


def _abandoned(v: Values) -> ColumnElement[bool]:
    return and_(jobs.c.status == RUNNING, jobs.c.lease_until <= v["now"])


def expirable(v: Values) -> ColumnElement[bool]:
    """Job.can_expire as a condition: past its deadline, waiting or abandoned, at `now`."""
    return and_(jobs.c.deadline <= v["now"], or_(jobs.c.status.in_(CLAIMABLE), _abandoned(v)))


def owned(v: Values) -> ColumnElement[bool]:
    """The job is of the tenant and the type the message named, where it named them
    (JobIdentity): a message cannot start another tenant's job."""
    return and_(
        or_(v["expect_tenant_id"].is_(None), jobs.c.tenant_id == v["expect_tenant_id"]),
        or_(v["expect_job_type"].is_(None), jobs.c.type == v["expect_job_type"]),
    )


def held(v: Values) -> ColumnElement[bool]:
    """The job still runs the attempt of the claim (ClaimToken): a write of that attempt's.
    A later claim (a takeover) changed attempts and started_at."""
    return and_(
        jobs.c.id == v["job_id"],
        jobs.c.status == RUNNING,
        jobs.c.attempts == v["claimed_attempt"],
        jobs.c.started_at == v["claimed_at"],
    )


# -- statements


def _claim(v: Values) -> Update:
    """One conditional update, so that two workers holding the same message cannot both
    start the job; as Job.start, it returns the job started."""
    return (
        update(jobs)
        .where(jobs.c.id == v["job_id"], claimable(v), owned(v))
        .values(
            status=RUNNING,
            attempts=jobs.c.attempts + literal_column("1"),
            started_at=v["now"],
            updated_at=v["now"],
            lease_until=v["lease_until"],
            run_after=null(),
            waiting=null(),
        )
        .returning(*jobs.c)
    )


def _expire(v: Values, where: ColumnElement[bool]) -> Update:
    """As Job.expire: the jobs of `where` that may expire end expired, never run."""
    return (
        update(jobs)
        .where(where, expirable(v))
        .values(
            status=_literal(JobStatus.EXPIRED.value),
            last_error=_literal(EXPIRED_ERROR),
            run_after=null(),
            lease_until=null(),
            waiting=null(),
            finished_at=v["now"],
            updated_at=v["now"],
        )
        .returning(*jobs.c)
    )


def _held_write(v: Values, columns: Collection[str]) -> Update:
    """Write `columns` of a job its claim still holds: the ids of the jobs written."""
    return update(jobs).where(held(v)).values({c: v[c] for c in columns}).returning(jobs.c.id)


def _note_waits(v: Values) -> Update:
    """What a deferred job waits for; a note made before the job last changed (it started
    meanwhile, or was cancelled) is dropped."""
    return (
        update(jobs)
        .where(jobs.c.id == v["job_id"], jobs.c.status.in_(CLAIMABLE), jobs.c.updated_at <= v["at"])
        .values(waiting=v["waiting"])
    )


def mark_published(v: Values) -> Update:
    return update(outbox).where(outbox.c.id == v["id"]).values(published_at=v["at"])


def messages_of(v: Values) -> Select[Any]:
    return select(*(v[name] for name in MESSAGE))


GET = select(jobs).where(jobs.c.id == bound(JOB)["job_id"])
# GET once no transaction holds the row for an update (a dispatcher's release under way).
GET_SETTLED = GET.with_for_update(read=True)
CANCEL_REQUESTED = select(jobs.c.cancel_requested).where(jobs.c.id == bound(JOB)["job_id"])
FLOW_MEMBERS = (
    select(jobs)
    .where(
        jobs.c.flow_id == bindparam("flow_id", type_=Uuid()),
        jobs.c.flow_role == _literal(FlowRole.MEMBER.value),
    )
    .order_by(*FLOW_ORDER)
)
CLAIM = _claim(bound(CLAIMING))
RECORD = _held_write(bound(RECORDING), RECORDED)
EXTEND_LEASE = _held_write(bound({**HELD, "lease_until": UtcDateTime()}), ("lease_until",))
WRITE_PROGRESS = _held_write(bound(PROGRESS), ("progress",))
# Executed once per note (many parameter sets, one call).
NOTE_WAIT = _note_waits(bound(NOTE))
BY_KEY = select(jobs).where(keyed(jobs, **bound(KEY)))
# The active job of a tenant's type and unique key (the partial unique index's rows).
_unique = bound(UNIQUE)
BY_UNIQUE = select(jobs).where(
    *(jobs.c[name] == _unique[name] for name in UNIQUE), jobs.c.status.in_([*CLAIMABLE, RUNNING])
)
EXPIRE = _expire(bound(EXPIRING), jobs.c.id == bound(EXPIRING)["job_id"])


def _overdue() -> Update:
    """Up to `batch` of the waiting jobs whose deadline has passed by `now`, expired (the
    sweep: a job whose message is parked behind a delay or a limit ends on time)."""
    v = bound({"now": UtcDateTime(), "batch": Integer()})
    due = (
        select(jobs.c.id)
        .where(
            jobs.c.deadline.is_not(None),
            jobs.c.status.in_(CLAIMABLE),
            jobs.c.deadline <= v["now"],
        )
        .order_by(jobs.c.deadline)
        .limit(v["batch"])
    )
    return _expire(v, jobs.c.id.in_(due.scalar_subquery()))


EXPIRE_OVERDUE = _overdue()
FLOW_BY_KEY = select(flows.c.kind).where(keyed(flows, **bound(KEY)))

# -- Postgres only: many jobs in one statement (the worker's coalesced calls, see
# PgJobStore), or a job's row and its messages in one.

CLAIM_MANY = _claim(unnested("c", CLAIMING))
RECORD_MANY = _held_write(unnested("r", RECORDING), RECORDED)
# SqlaJobRepository.save_held for many jobs, in the session's transaction: RECORD_MANY
# with `waiting` too.
SAVE_HELD_MANY = _held_write(
    unnested("r", {**RECORDING, "waiting": Json}, json_text=("result", "waiting")),
    (*RECORDED, "waiting"),
)
WRITE_PROGRESS_MANY = _held_write(unnested("p", PROGRESS), ("progress",))


def _note_waits_skipping_locked(v: Values) -> Update:
    """_note_waits for many jobs, passing by those another transaction holds (a claim
    or a release under way: the note would be dropped or cleared anyway). Never waiting
    for a row lock, the notes cannot deadlock with the claims of the same jobs
    (tests/integration/test_pg_lock_order.py)."""
    j = jobs.alias("j")
    free = (
        select(j.c.id, v["waiting"].label("waiting"), v["at"].label("at"))
        .where(j.c.id == v["job_id"])
        .order_by(j.c.id)
        .with_for_update(of=j, skip_locked=True)
        .subquery("free")
    )
    return (
        update(jobs)
        .where(jobs.c.id == free.c.id, jobs.c.status.in_(CLAIMABLE), jobs.c.updated_at <= free.c.at)
        .values(waiting=free.c.waiting)
    )


NOTE_WAITS = _note_waits_skipping_locked(unnested("n", NOTE, json_text=("waiting",)))
MARK_PUBLISHED = mark_published(unnested("p", MARK, prefix="mark_"))


def _record_with_messages() -> Select[Any]:
    """RECORD and the messages of the attempt's end, written only if the record was."""
    updated = RECORD.cte("updated")
    messages = unnested("m", MESSAGE, prefix="message_")
    written = (
        insert(outbox)
        .from_select(list(MESSAGE), messages_of(messages).where(exists(select(updated.c.id))))
        .cte("messages")
    )
    return select(func.count().label("count")).select_from(updated).add_cte(written)


RECORD_WITH_MESSAGES = _record_with_messages()
