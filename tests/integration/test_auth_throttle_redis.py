"""The failed-authentication throttle on the real Redis: peeked at before the lookup,
charged only when the lookup fails, and never refusing a key seen live."""

import asyncio
from collections.abc import Callable
from typing import Any

from jobrail.settings import AuthSettings, Settings
from tests.support.fixtures import ApiClient
from tests.support.rabbit import RabbitProbe

BUDGET = 20


async def test_wrong_keys_past_the_budget_are_429s_and_good_keys_never_pay(
    api: ApiClient,
) -> None:
    good_keys = [await api.key_for(f"t{n}") for n in range(BUDGET + 5)]
    good = [
        (await api.get("/jobs", headers={"Authorization": f"Bearer {key}"})).status_code
        for key in good_keys
    ]
    wrong = [
        (await api.get("/jobs", headers={"Authorization": f"Bearer jr_wrong-{n}"})).status_code
        for n in range(BUDGET + 5)
    ]

    assert set(good) == {200}
    assert wrong[:BUDGET] == [401] * BUDGET
    assert set(wrong[BUDGET:]) == {429}


async def test_on_redis_a_wrong_key_flood_spares_keys_seen_live_and_bursts_of_one_key(
    stack_settings: Settings, rabbit: RabbitProbe, make_api: Callable[[Settings], Any]
) -> None:
    # No key cache: every request is as after the cache expired.
    settings = stack_settings.model_copy(update={"auth": AuthSettings(key_cache_ttl_s=0)})
    async with make_api(settings) as api:
        seen = await api.key_for("seen")
        fresh = await api.key_for("fresh")
        assert (await api.get("/jobs", headers=_bearer(seen))).status_code == 200

        burst = await asyncio.gather(*(api.get("/jobs", headers=_bearer(fresh)) for _ in range(40)))
        flood = [
            (await api.get("/jobs", headers=_bearer(f"jr_wrong-{n}"))).status_code
            for n in range(BUDGET + 5)
        ]
        after = [(await api.get("/jobs", headers=_bearer(seen))).status_code for _ in range(5)]

    assert [r.status_code for r in burst] == [200] * 40
    assert flood[:BUDGET] == [401] * BUDGET
    assert set(flood[BUDGET:]) == {429}
    assert after == [200] * 5


def _bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}
