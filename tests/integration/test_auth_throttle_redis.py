"""The failed-authentication throttle on the real Redis: charged before the lookup,
refunded for a live key."""

from tests.support.fixtures import ApiClient

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
