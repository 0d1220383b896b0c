"""The order fair dispatch releases a queue's held jobs in (jobrail.dispatch.model)."""

from collections import Counter

import pytest

from jobrail.dispatch.model import FairShares


def release(shares: FairShares, count: int) -> list[str]:
    picks = shares.plan(count)
    for tenant in picks:
        shares.charge(tenant)
    return picks


def test_tenants_with_equal_weights_take_turns_exactly() -> None:
    shares = FairShares()
    shares.activate_all(["b", "a", "c"])
    picks = release(shares, 600)
    assert Counter(picks) == {"a": 200, "b": 200, "c": 200}
    # Ties go by tenant id, so the order is the same every time.
    assert picks[:6] == ["a", "b", "c", "a", "b", "c"]


def test_weights_share_in_proportion() -> None:
    shares = FairShares()
    for tenant, weight in (("a", 3.0), ("b", 2.0), ("c", 1.0)):
        shares.activate(tenant, weight)
    picks = release(shares, 600)
    assert Counter(picks) == {"a": 300, "b": 200, "c": 100}
    for start in range(0, 600, 60):  # every window of 60 releases, not just the total
        assert Counter(picks[start : start + 60]) == {"a": 30, "b": 20, "c": 10}


def test_a_late_tenant_competes_at_once_not_after_the_backlog() -> None:
    shares = FairShares()
    shares.activate("a")
    release(shares, 1000)  # a alone for a while
    shares.activate("b")
    picks = release(shares, 20)
    assert Counter(picks) == {"a": 10, "b": 10}
    assert picks[:2] in (["a", "b"], ["b", "a"])


def test_an_idle_tenant_banks_nothing() -> None:
    shares = FairShares()
    shares.activate_all(["a", "b"])
    release(shares, 10)
    shares.deactivate("b")  # b had nothing for a while; a went on alone
    release(shares, 500)
    shares.activate("b")
    picks = release(shares, 100)
    # b gets its half from now on, not the 500 it did not take meanwhile.
    assert Counter(picks) == {"a": 50, "b": 50}


def test_a_tenant_that_comes_back_keeps_no_lead_it_had_not_earned() -> None:
    shares = FairShares()
    shares.activate_all(["a", "b"])
    release(shares, 10)
    shares.deactivate("a")
    shares.activate("a")  # at once: its place is the same, not ahead
    assert Counter(release(shares, 10)) == {"a": 5, "b": 5}


def test_plan_changes_nothing_and_charge_follows_it() -> None:
    shares = FairShares()
    shares.activate_all(["a", "b"])
    assert shares.plan(3) == shares.plan(3) == ["a", "b", "a"]
    with pytest.raises(ValueError, match="not the next tenant"):
        shares.charge("b")
    shares.charge("a")
    assert shares.plan(1) == ["b"]


def test_many_tenants_come_and_go_without_keeping_them_all() -> None:
    shares = FairShares()
    for n in range(5000):
        shares.activate(f"t{n}")
        release(shares, 1)
        shares.deactivate(f"t{n}")
    assert not shares.active
    assert len(shares._vtime) < 200  # idle tenants behind the queue are forgotten
    assert shares.plan(5) == []


def test_weights_are_positive() -> None:
    with pytest.raises(ValueError, match="positive"):
        FairShares().activate("a", 0)


def test_a_weight_changed_applies_from_the_next_release() -> None:
    shares = FairShares()
    shares.activate_all(["a", "b"])
    assert Counter(release(shares, 100)) == {"a": 50, "b": 50}
    shares.activate("a", 4.0)  # already active: only its weight changes
    assert Counter(release(shares, 100)) == {"a": 80, "b": 20}
