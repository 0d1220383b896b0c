"""Keys made from callers' values fit their columns, and stay unique and repeatable."""

import pytest
from pydantic import BaseModel

from jobrail.jobs.registry import job
from jobrail.kernel.keys import MAX_KEY_LENGTH, fitted
from jobrail.worker.context import JobContext
from tests.fakes import make_job


def test_a_key_that_fits_is_kept_as_it_is() -> None:
    assert fitted("sync:shop-1:0") == "sync:shop-1:0"
    assert fitted("k" * MAX_KEY_LENGTH) == "k" * MAX_KEY_LENGTH


def test_a_longer_key_fits_and_keeps_its_beginning_and_identity() -> None:
    long = "sync:" + "a" * 255 + ":0"
    other = "sync:" + "a" * 255 + ":1"  # differs past the part that is kept
    assert len(fitted(long)) == MAX_KEY_LENGTH
    assert fitted(long).startswith("sync:aaa")
    assert fitted(long) == fitted(long)
    assert fitted(long) != fitted(other)
    assert fitted("\ud800" * 300)  # a lone surrogate does not break the digest


def test_a_job_made_with_long_keys_stores_fitted_ones() -> None:
    created = make_job(idempotency_key="i" * 400, entity_id="e" * 300)
    assert created.idempotency_key == fitted("i" * 400)
    assert created.entity_id == fitted("e" * 300)


class Empty(BaseModel):
    pass


async def _handler(payload: Empty, ctx: JobContext) -> None:
    return None


@pytest.mark.parametrize(
    ("name", "queue"), [("a." + "b" * 127, "jobs.default"), ("a.b", "q." + "x" * 127)]
)
def test_a_job_type_whose_name_or_queue_its_table_cannot_hold_is_refused(
    name: str, queue: str
) -> None:
    with pytest.raises(ValueError, match="longer than 128 characters"):
        job(name, payload=Empty, queue=queue)(_handler)
