"""Redis Cluster slots of limit keys: the hash-tag rule, and the start-up check built on it.

Slots are computed with redis-py's own CRC16 (``redis.crc.key_slot``), on the names the
Redis backend really sends; no Redis is needed.
"""

from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel
from redis.asyncio import Redis
from redis.crc import key_slot

from jobrail.jobs.registry import JobRegistry, job
from jobrail.limits.api import ApiRateLimiter
from jobrail.limits.counters import LimitCounters
from jobrail.limits.memory import MemoryLimits
from jobrail.limits.model import (
    Acquire,
    Admission,
    Concurrency,
    JobLimits,
    KeyTemplate,
    Lock,
    SlidingWindow,
    TokenBucket,
    hash_tagged,
    slot_part,
)
from jobrail.limits.redis import RedisLimits
from jobrail.runtime.modules import load_modules
from jobrail.scheduler.leadership import LEADER_KEY
from jobrail.settings import ApiLimitsSettings, Settings, SettingsError, load_settings
from tests.support.apps import reference_and_test_jobs

# A client object makes no connection until it is used: these tests only name keys.
BACKEND = RedisLimits(Redis(), key_prefix="t.jobrail:")


def _slots(items: Sequence[Acquire]) -> set[int]:
    return {key_slot(name.encode()) for name in BACKEND._keys(items)}


def test_a_key_is_named_with_its_owner_as_the_hash_tag() -> None:
    assert hash_tagged("vendor:acme") == "vendor:{acme}"
    assert hash_tagged("account:acme:a7") == "account:{acme}:a7"
    assert hash_tagged("api:enqueue:ip:::1") == "api:{enqueue}:ip:::1"
    assert hash_tagged("email-provider") == "{email-provider}"
    assert BACKEND.key(Acquire(Lock(key="x"), "scheduler:leader")) == (
        "t.jobrail:lk:scheduler:{leader}"
    )


def test_braces_and_empty_owners_in_values_cannot_move_or_empty_the_tag() -> None:
    # Redis reads the first '{' and the first '}' after it; '{}' is no tag at all.
    assert hash_tagged("a}{:b") == "a%7D%7B:{b}"
    assert hash_tagged("vendor:}x") == "vendor:{%7Dx}"
    assert hash_tagged("vendor:") == "vendor:{%}"
    assert hash_tagged("") == "{%}"
    assert hash_tagged("vendor:%") != hash_tagged("vendor:")


values = st.text(alphabet=st.sampled_from("ab:{}%-"), max_size=6)


@given(st.lists(st.tuples(values, values), min_size=1, max_size=12, unique=True))
def test_distinct_keys_keep_distinct_names(pairs: list[tuple[str, str]]) -> None:
    keys = {f"{a}:{b}" for a, b in pairs} | {a for a, _ in pairs}
    assert len({hash_tagged(key) for key in keys}) == len(keys)


@given(tenant=values, account=values, event=values)
def test_keys_whose_templates_agree_on_the_owner_share_a_slot_for_any_values(
    tenant: str, account: str, event: str
) -> None:
    values = {"tenant_id": tenant, "account_id": account, "event_id": event}
    declared = JobLimits(
        limits=[
            TokenBucket("vendor", key="vendor:{tenant_id}", capacity=1, per_second=1),
            Concurrency("pool", key="pool:{tenant_id}:{event_id}", slots=1),
        ],
        lock=Lock(key="account:{tenant_id}:{account_id}"),
    )
    declared.check_one_slot("t.sync")
    items = [
        Acquire(limit, key)
        for limit, key in zip(declared.all(), declared.keys(values), strict=True)
    ]
    assert len(_slots(items)) == 1

    shared = JobLimits(
        limits=[TokenBucket("mail", key="email-provider", capacity=1, per_second=1)],
        lock=Lock(key="receipt:email-provider:{event_id}"),
    )
    shared.check_one_slot("t.receipt")
    items = [
        Acquire(limit, key) for limit, key in zip(shared.all(), shared.keys(values), strict=True)
    ]
    assert len(_slots(items)) == 1


@pytest.mark.parametrize(
    ("template", "part"),
    [
        ("vendor:{tenant_id}", ("field", "tenant_id")),
        ("account:{tenant_id}:{account_id}", ("field", "tenant_id")),
        ("email-provider", ("text", "email-provider")),
        ("receipt:email-provider:{event_id}", ("text", "email-provider")),
        ("a:b:{c}:d", ("text", "b")),
        ("vendor:", ("text", "")),
        ("{tenant_id}:vendor", None),  # the value may hold a ':' itself
        ("vendor-{tenant_id}", None),
        ("vendor:eu-{tenant_id}", None),
        ("vendor:{tenant_id}-eu", None),
        ("vendor:{tenant_id}{region}", None),
    ],
)
def test_what_decides_a_templates_slot(template: str, part: Any) -> None:
    assert slot_part(template) == part


@given(
    template=st.lists(
        st.one_of(st.sampled_from(["a", ":", "-", "{{", "}}"]), st.sampled_from(["{x}", "{y}"])),
        max_size=6,
    ).map("".join),
    x=values,
    y=values,
)
def test_a_determined_slot_part_is_what_the_rendered_key_is_tagged_by(
    template: str, x: str, y: str
) -> None:
    part = slot_part(template)
    rendered = KeyTemplate(template).render({"x": x, "y": y})
    if part is None:
        return
    kind, text = part
    owner = {"x": x, "y": y}[text] if kind == "field" else text
    expected = hash_tagged(f"k:{owner}")
    tag = expected[expected.index("{") : expected.index("}") + 1]
    assert tag in hash_tagged(rendered)
    assert key_slot(hash_tagged(rendered).encode()) == key_slot(expected.encode())


class Payload(BaseModel):
    resource: str


async def _handler(payload: Payload, ctx: object) -> None:
    return None


SPLIT = job(
    "t.split",
    payload=Payload,
    lock=Lock(key="resource:{resource}"),
    limits=[Concurrency("slots", key="pool:{tenant_id}", slots=8)],
)(_handler)


def test_a_job_type_whose_keys_cannot_share_a_slot_is_refused_on_a_cluster_only() -> None:
    JobRegistry([SPLIT], queues=["jobs.default"], default_timeout_s=1)

    with pytest.raises(ValueError, match="cannot share a Redis Cluster slot") as refused:
        JobRegistry([SPLIT], queues=["jobs.default"], default_timeout_s=1, redis_cluster=True)

    message = str(refused.value)
    assert "'t.split'" in message
    assert "'resource:{resource}'" in message
    assert "'pool:{tenant_id}'" in message
    assert "slot by field 'resource'" in message
    assert "slot by field 'tenant_id'" in message


def test_one_key_used_by_several_limits_of_a_job_is_one_slot_whatever_its_shape() -> None:
    JobLimits(
        limits=[
            TokenBucket("rate", key="vendor-{tenant_id}", capacity=1, per_second=1),
            SlidingWindow("daily", key="vendor-{tenant_id}", limit=5, window_s=86400),
        ],
    ).check_one_slot("t.same")


def test_every_job_type_of_the_reference_application_fits_a_cluster() -> None:
    modules = [*load_modules(Settings().modules), *reference_and_test_jobs.modules]

    JobRegistry(
        (spec for module in modules for spec in module.jobs),
        queues=Settings().rabbit.queues,
        default_timeout_s=1,
        redis_cluster=True,
    )


class Recording(MemoryLimits):
    def __init__(self) -> None:
        super().__init__()
        self.admitted: list[list[Acquire]] = []

    async def admit(self, items: Sequence[Acquire], holder: str, **kwargs: Any) -> Admission:
        self.admitted.append(list(items))
        return await super().admit(items, holder, **kwargs)


async def test_an_api_route_groups_rules_are_checked_on_one_slot() -> None:
    backend = Recording()
    rules = ApiLimitsSettings()
    limiter = ApiRateLimiter(backend, rules, LimitCounters())

    await limiter.check("enqueue", tenant="acme")
    await limiter.check("read", tenant="{globex}")

    assert [len(items) for items in backend.admitted] == [len(rules.enqueue), len(rules.read)]
    for items in backend.admitted:
        assert len(_slots(items)) == 1


def test_the_scheduler_lock_and_its_fencing_counter_share_a_slot() -> None:
    assert len(_slots([Acquire(Lock(key=LEADER_KEY), LEADER_KEY)])) == 1


def test_cluster_settings_refuse_what_a_cluster_cannot_be(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("JOBRAIL_REDIS__CLUSTER", "true")
    for url, problem in [
        ("unix:///run/redis.sock", "not a unix:// socket"),
        ("redis://10.0.0.5:7000/3", "only database 0"),
    ]:
        monkeypatch.setenv("JOBRAIL_REDIS__URL", url)
        with pytest.raises(SettingsError, match=problem):
            load_settings()
    monkeypatch.setenv("JOBRAIL_REDIS__URL", "redis://10.0.0.5:7000/0")
    assert load_settings().redis.cluster


def test_a_key_prefix_with_a_brace_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JOBRAIL_REDIS__KEY_PREFIX", "{jobrail}:")

    with pytest.raises(SettingsError, match="JOBRAIL_REDIS__KEY_PREFIX"):
        load_settings()


def test_literal_braces_in_a_template_are_text_like_any_other() -> None:
    # '{{' is a literal '{' in a template, as in str.format; hash_tagged escapes it.
    assert slot_part("a{{b}}:{c}") == ("field", "c")
    assert hash_tagged(KeyTemplate("a{{b}}:{c}").render({"c": "x"})) == "a%7Bb%7D:{x}"
