"""Priorities as head starts in a tenant's line (jobrail.jobs.priority): a higher one goes
ahead of lower ones due a little before it, never of those due long before it."""

from datetime import timedelta

import pytest
from pydantic import BaseModel, ValidationError

from jobrail.jobs.enqueue import EnqueueJobCommand, new_job
from jobrail.jobs.priority import DEFAULT_OFFSETS, LineRules, Priority
from jobrail.jobs.registry import JobRegistry, job
from jobrail.jobs.timing import resolve_options
from jobrail.kernel.errors import InvalidInputError
from jobrail.kernel.ids import TenantId
from jobrail.settings import DispatchSettings
from tests.fakes import START

RULES = LineRules(DEFAULT_OFFSETS)


def test_a_high_job_overtakes_lower_ones_due_less_than_its_head_start_before_it() -> None:
    low = RULES.rank(START, Priority.LOW)
    assert RULES.rank(START + timedelta(seconds=119), Priority.HIGH) < low
    assert RULES.rank(START + timedelta(seconds=121), Priority.HIGH) > low  # it has aged
    assert RULES.rank(START + timedelta(seconds=29), Priority.NORMAL) < low
    assert RULES.rank(START + timedelta(seconds=599), Priority.URGENT) < low


def test_a_flood_of_high_jobs_leaves_a_low_one_a_place_in_line() -> None:
    # Highs enqueued every second from START, a low one at START + 10 s: after it come
    # the highs enqueued later than 10 s + 120 s, whatever their number.
    highs = [RULES.rank(START + timedelta(seconds=n), Priority.HIGH) for n in range(1000)]
    low = RULES.rank(START + timedelta(seconds=10), Priority.LOW)
    ahead = sum(rank < low for rank in highs)
    assert ahead == 130


def test_a_priority_is_named_and_refused_with_the_names_it_could_have() -> None:
    assert Priority.of("HIGH") is Priority.HIGH
    assert Priority.of(Priority.LOW) is Priority.LOW
    with pytest.raises(InvalidInputError, match="low, normal, high, urgent") as refused:
        Priority.of("asap")
    assert refused.value.details[0]["loc"] == ["priority"]
    assert resolve_options(START, priority="urgent").priority is Priority.URGENT
    with pytest.raises(InvalidInputError) as option:
        resolve_options(START, priority="soon")
    assert option.value.details[0]["loc"] == ["priority"]


def test_the_offsets_are_set_for_every_priority_and_grow_with_it() -> None:
    rules = LineRules.of(
        DispatchSettings(
            enabled=True,
            priority_offsets_s={"low": 0, "normal": 1, "high": 2, "urgent": 3},
        )
    )
    assert rules is not None
    assert rules.offsets[Priority.URGENT] == timedelta(seconds=3)
    assert LineRules.of(DispatchSettings()) is None  # dispatch off: nothing is held
    for offsets in (
        {"low": 0, "normal": 1, "high": 2},
        {"low": 0, "normal": 1, "high": 2, "urgent": 3, "asap": 4},
        {"low": 5, "normal": 1, "high": 2, "urgent": 3},
    ):
        with pytest.raises(ValidationError):
            DispatchSettings(priority_offsets_s=offsets)


class _Type:
    name = "demo.echo"
    queue = "jobs.default"
    max_attempts = None
    open_to_tenants = False
    priority = Priority.HIGH

    def validate_payload(self, payload: object) -> dict[str, object]:
        return dict(payload)  # type: ignore[call-overload]

    def limit_keys(self, payload: object, tenant_id: str) -> None:
        return None

    def fair_key_of(self, payload: object, tenant_id: str) -> str:
        return ""


def test_a_job_takes_its_enqueue_s_priority_or_else_its_type_s() -> None:
    def command(priority: Priority | None) -> EnqueueJobCommand:
        return EnqueueJobCommand(TenantId("a"), "demo.echo", {}, priority=priority)

    assert new_job(_Type(), command(None), START, 3).priority is Priority.HIGH
    assert new_job(_Type(), command(Priority.LOW), START, 3).priority is Priority.LOW


class _UserPayload(BaseModel):
    user_id: str


async def _handler(payload: _UserPayload, ctx: object) -> None:
    return None


def test_a_type_s_fair_key_is_its_template_over_the_payload_and_the_tenant() -> None:
    spec = job("demo.keyed", payload=_UserPayload, fair_key="{tenant_id}:{user_id}")(_handler)
    keyed = JobRegistry([spec], queues=["jobs.default"], default_timeout_s=10).get("demo.keyed")
    plain = JobRegistry(
        [job("demo.plain", payload=_UserPayload)(_handler)],
        queues=["jobs.default"],
        default_timeout_s=10,
    ).get("demo.plain")

    assert keyed is not None
    assert plain is not None
    assert keyed.fair_key_of({"user_id": "u7"}, "acme") == "acme:u7"
    assert plain.fair_key_of({"user_id": "u7"}, "acme") == ""


def test_a_fair_key_naming_a_field_the_payload_lacks_is_refused_when_declared() -> None:
    with pytest.raises(ValueError, match="fair_key '\\{account\\}' names field 'account'"):
        job("demo.keyed", payload=_UserPayload, fair_key="{account}")(_handler)
