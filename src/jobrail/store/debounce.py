"""A debounced enqueue, in one statement: the job is added or, while a job of its
tenant, type and debounce key is pending, that job takes the new payload instead (it
runs once, when its window closes, with the last payload). A job that has started
frees the key: the next enqueue opens a new window.

Its own statement, not the enqueue's many-rows one: a conflict on the pending debounce
key updates, where every other unique index's conflict leaves the row out.
"""

from typing import Any, NoReturn

from sqlalchemy import ColumnElement, Insert, Select, and_, exists, insert, literal_column, or_
from sqlalchemy import select as select_
from sqlalchemy.dialects import postgresql, sqlite

from jobrail.kernel.errors import ConflictError, QueuedCapError
from jobrail.store.dialects import under_queued_cap
from jobrail.store.queries import CAPPED, ENQUEUED, MESSAGE, Values, bound
from jobrail.store.tables import PENDING_DEBOUNCE, jobs, outbox

# What a later enqueue changes of the pending job: its payload, and when it changed.
REPLACED = ("payload", "updated_at")


def _pending(v: Values) -> ColumnElement[bool]:
    """The tenant's pending job of the type and debounce key (the index's row)."""
    return and_(
        jobs.c.tenant_id == v["tenant_id"],
        jobs.c.type == v["type"],
        jobs.c.debounce_key == v["debounce_key"],
        jobs.c.status == literal_column("'pending'"),
    )


def debounced(dialect: str, v: Values | None = None) -> Insert:
    """The upsert, returning the job as it is now (added: its own id; else the pending
    job's). No row when the tenant is at its cap and nothing was pending to take the
    payload: a job that collapses into a pending one adds nothing to the line."""
    v = v or bound(CAPPED)
    admitted = or_(under_queued_cap(v["cap_tenant_id"]), exists().where(_pending(v)))
    module: Any = postgresql if dialect == "postgresql" else sqlite
    statement = module.insert(jobs).from_select(
        ENQUEUED, select_(*(v[name] for name in ENQUEUED)).where(admitted)
    )
    return statement.on_conflict_do_update(  # type: ignore[no-any-return]
        index_elements=["tenant_id", "type", "debounce_key"],
        index_where=PENDING_DEBOUNCE,
        set_={name: statement.excluded[name] for name in REPLACED},
    ).returning(*jobs.c)


def debounced_with_message() -> Select[Any]:
    """Postgres: the upsert, and the job's message, written only if the job was added."""
    v = bound(CAPPED)
    upserted = debounced("postgresql", v).cte("upserted")
    message = bound({f"message_{name}": type_ for name, type_ in MESSAGE.items()})
    written = (
        insert(outbox)
        .from_select(
            list(MESSAGE),
            select_(*(message[f"message_{name}"] for name in MESSAGE)).where(
                exists().where(upserted.c.id == v["id"])
            ),
        )
        .cte("message")
    )
    return select_(upserted).add_cte(written)


def refused_by_cap(tenant_id: str, cap: int | None) -> NoReturn:
    """A debounced enqueue that wrote nothing: its tenant is at its cap (or, if it has
    none now, the cap was removed meanwhile: the caller may try again)."""
    if cap is None:
        raise ConflictError("the tenant's cap changed while enqueueing; try again")
    raise QueuedCapError(tenant_id, cap)
