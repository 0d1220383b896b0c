"""The enqueue's statement on Postgres (``ENQUEUE`` in ``store/pg_queries.py``): the jobs
of many requests, their messages and the outbox marks waiting, in one statement, from
the conditions and column lists of ``store/queries.py``."""

from typing import Any

from sqlalchemy import (
    Integer,
    Select,
    Text,
    Uuid,
    case,
    func,
    insert,
    literal_column,
    null,
    or_,
    select,
    update,
)
from sqlalchemy.dialects.postgresql import insert as pg_insert

from jobrail.store.dialects import arrivals_noted, key_is_free, under_queued_cap
from jobrail.store.queries import (
    CAPPED,
    ENQUEUED,
    MARK,
    MESSAGE,
    Types,
    Values,
    mark_published,
    messages_of,
    unnested,
)
from jobrail.store.tables import dispatch_gates, flows, jobs, outbox

# Each job's place among the batch's jobs of its queue that it would hold (NULL: one it
# would not), and per queue how many those are.
GATED: Types = {**CAPPED, "gate_rank": Integer()}
GATE: Types = {"queue": Text(), "n": Integer()}


def _through_gate(j: Values) -> Any:
    """A new job's `held_since`: NULL (released: its message goes at the commit) for the
    first of the batch's jobs to hold in each queue, as many as the queue's fast-path
    credit had left (jobrail.dispatch, ``dispatch_gates``), which they take from it;
    else what its enqueue gave it. The credit may go below zero (a batch wanting more
    than was left), and a batch that holds a job marks it spent: the dispatcher does not
    top it up again until a pass has seen the jobs held (their arrival notes)."""
    g, w = dispatch_gates, unnested("w", GATE, prefix="gate_")
    zero: Any = literal_column("0")
    took = (
        update(g)
        # A closed gate is written once, by the first enqueue that holds a job behind it.
        .where(g.c.queue == w["queue"], or_(g.c.credit > zero, ~g.c.spent))
        .values(credit=g.c.credit - w["n"], spent=or_(g.c.spent, w["n"] > g.c.credit))
        .returning(
            g.c.queue, func.least(w["n"], func.greatest(g.c.credit + w["n"], zero)).label("took")
        )
        .cte("took")
    )
    allowed = select(took.c.took).where(took.c.queue == j["queue"]).scalar_subquery()
    return case((j["gate_rank"] <= allowed, null()), else_=j["held_since"])


def enqueue() -> Select[Any]:
    """The jobs of many requests and their messages, in one statement. JSON documents
    arrive as text, encoded per request (a NUL is refused for that request alone). A row
    whose key is taken (by an earlier row of the same batch too), or started a batch or
    chain, or whose tenant is at its cap, is left out, and so is its message (the caller
    tells which). The marks of rows published since the last statement ride along (see
    PgOutboxMarks). The ids of the jobs added, and whether each is held (a job the
    caller would hold goes out at once while its queue's gate is open)."""
    j = unnested("j", GATED, json_text=("payload", "result", "trace_context"), ordinality="n")
    fresh = or_(
        j["idempotency_key"].is_(None),
        key_is_free(flows, tenant_id=j["tenant_id"], idempotency_key=j["idempotency_key"]),
    )
    capped = under_queued_cap(j["cap_tenant_id"])
    gated: dict[str, Any] = {"held_since": _through_gate(j)}
    columns: list[Any] = [gated.get(name, j[name]) for name in ENQUEUED]
    rows = select(*columns).where(fresh, capped).order_by(j["n"])
    added = (
        pg_insert(jobs)
        .from_select(ENQUEUED, rows)
        .on_conflict_do_nothing()  # no target: the idempotency key's and the unique key's
        .returning(jobs.c.id, jobs.c.queue, jobs.c.tenant_id, jobs.c.fair_key, jobs.c.held_since)
        .cte("added")
    )
    # A held job has no message (the dispatcher makes it): its tenant is noted instead.
    released = select(added.c.id).where(added.c.held_since.is_(None))
    m = unnested("m", {"job_id": Uuid(), **MESSAGE}, prefix="message_", json_text=("headers",))
    messages = (
        insert(outbox)
        .from_select(list(MESSAGE), messages_of(m).where(m["job_id"].in_(released)))
        .cte("messages")
    )
    marked = mark_published(unnested("p", MARK, prefix="mark_")).cte("marked")
    return select(added.c.id, added.c.held_since).add_cte(messages, marked, arrivals_noted(added))


ENQUEUE = enqueue()
