"""The hot path's SQL is compiled from store/queries.py, its parameters numbered in the
order the callers pass them."""

import re

import pytest
from sqlalchemy import bindparam, select

from jobrail.store import pg_queries
from jobrail.store.pg_queries import compiled
from jobrail.store.tables import jobs


def test_parameters_are_numbered_in_the_order_given() -> None:
    statement = select(jobs.c.id).where(
        jobs.c.tenant_id == bindparam("tenant"), jobs.c.type == bindparam("kind")
    )

    sql = compiled(statement, "kind", "tenant")

    assert "jobs.tenant_id = $2::VARCHAR AND jobs.type = $1::VARCHAR" in sql


def test_a_parameter_left_out_or_unknown_is_refused() -> None:
    statement = select(jobs.c.id).where(jobs.c.tenant_id == bindparam("tenant"))

    with pytest.raises(AssertionError):
        compiled(statement)
    with pytest.raises(AssertionError):
        compiled(statement, "tenant", "kind")


def test_every_statement_numbers_its_parameters_from_one_without_a_gap() -> None:
    statements = {
        name: value
        for name, value in vars(pg_queries).items()
        if name.isupper() and isinstance(value, str)
    }

    assert len(statements) == 20
    for name, sql in statements.items():
        numbers = {int(n) for n in re.findall(r"\$(\d+)", sql)}
        assert numbers == set(range(1, len(numbers) + 1)), name
