"""The SQL of the hot paths on Postgres, all in this one module, each statement named:
what the worker's job store (``store/pg_job_store.py``) and the API's intake and outbox
marks (``store/pg_intake.py``) run, through asyncpg directly.

Enqueue, claim and record run on every job, so they skip the ORM layer and the
explicit transaction: each is a single statement in autocommit mode, atomic on its
own (a data-modifying CTE writes the job and its message together). The statements
themselves are defined once, in ``store/queries.py``, which the SQLAlchemy store
(``store/jobs.py``) runs as they are; here they are compiled for asyncpg once, at
import, their ``$n`` parameters numbered in the order the callers pass them. The
contract tests in ``tests/contracts`` hold both stores, and the fakes, to the same rules.
"""

import re
from typing import Any

from sqlalchemy import Text, bindparam, select
from sqlalchemy.engine import make_url
from sqlalchemy.sql import ClauseElement

from jobrail.store import queries as q
from jobrail.store.debounce import debounced_with_message
from jobrail.store.dialects import queued_cap, under_queued_cap
from jobrail.store.enqueue_statement import ENQUEUE as ENQUEUE_STATEMENT
from jobrail.store.enqueue_statement import GATED

# SQLAlchemy's asyncpg dialect: its parameters are asyncpg's ($n), each with its type.
_ASYNCPG = make_url("postgresql+asyncpg://").get_dialect()()
_PARAMETER = re.compile(r"\$(\d+)")


def compiled(statement: ClauseElement, *order: str) -> str:
    """The statement's text for asyncpg, its parameter `order[i]` as ``$(i + 1)``.

    SQLAlchemy numbers a statement's parameters as it meets them, which is not the order
    a caller would choose, nor one that stays put when a condition changes: each name is
    given its place in `order` instead. Every parameter must be there, and nothing else.
    """
    sql: Any = statement.compile(dialect=_ASYNCPG)
    names: list[str] = list(sql.positiontup)
    assert sorted(names) == sorted(order), f"parameters {names}, not {order}"
    text: str = sql.string
    assert "POSTCOMPILE" not in text, "an expanding parameter cannot be numbered once"
    assert text.count("$") == len(_PARAMETER.findall(text)), "a $ that is no parameter"
    place = {name: order.index(name) + 1 for name in names}
    return _PARAMETER.sub(lambda m: f"${place[names[int(m[1]) - 1]]}", text)


_HELD = ("job_id", "claimed_attempt", "claimed_at")
_CLAIM = ("job_id", "now", "lease_until", "due_by", "expect_tenant_id", "expect_job_type")
_MESSAGE = tuple(f"message_{name}" for name in q.MESSAGE)

GET = compiled(q.GET, "job_id")
GET_SETTLED = compiled(q.GET_SETTLED, "job_id")
CLAIM = compiled(q.CLAIM, *_CLAIM)
# The outbox rows' parameters come after the job's, and the claim's started_at last.
RECORD = compiled(
    q.RECORD_WITH_MESSAGES, "job_id", "claimed_attempt", *q.RECORDED, *_MESSAGE, "claimed_at"
)

# The same two statements for many jobs at once (see PgJobStore).
CLAIM_MANY = compiled(q.CLAIM_MANY, *_CLAIM)
RECORD_MANY = compiled(q.RECORD_MANY, *_HELD, *q.RECORDED)

CANCEL_REQUESTED = compiled(q.CANCEL_REQUESTED, "job_id")
FLOW_MEMBERS = compiled(q.FLOW_MEMBERS, "flow_id")
# The wait notes as JSON text, many at once.
NOTE_WAITS = compiled(q.NOTE_WAITS, "job_id", "waiting", "at")
EXTEND_LEASE = compiled(q.EXTEND_LEASE, *_HELD, "lease_until")
WRITE_PROGRESS = compiled(q.WRITE_PROGRESS, *_HELD, "progress")
WRITE_PROGRESS_MANY = compiled(q.WRITE_PROGRESS_MANY, *_HELD, "progress")

# Enqueue: the jobs of every request in the batch (their columns in ENQUEUED's order, the
# JSON documents as text), their messages (each with its job's id first, its headers as
# text) and the published marks, in one statement.
ENQUEUE = compiled(
    ENQUEUE_STATEMENT,
    *GATED,
    "message_job_id",
    *_MESSAGE,
    "mark_id",
    "mark_at",
    "gate_queue",
    "gate_n",
)
BY_KEY = compiled(q.BY_KEY, "tenant_id", "idempotency_key")
FLOW_BY_KEY = compiled(q.FLOW_BY_KEY, "tenant_id", "idempotency_key")
BY_UNIQUE = compiled(q.BY_UNIQUE, "tenant_id", "type", "unique_key")
EXPIRE = compiled(q.EXPIRE, "job_id", "now")
DEBOUNCE = compiled(debounced_with_message(), *q.CAPPED, *(f"message_{name}" for name in q.MESSAGE))
_TENANT: Any = bindparam("tenant_id", Text())
# The tenant's cap, and whether it is under it.
QUEUED_CAP = compiled(select(queued_cap(_TENANT), under_queued_cap(_TENANT)), "tenant_id")
MARK_PUBLISHED = compiled(q.MARK_PUBLISHED, "mark_id", "mark_at")
