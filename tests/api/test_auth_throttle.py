"""Failed authentication is throttled per client before the key is looked up; per-IP
limits never apply to authenticated traffic; X-Forwarded-For only from trusted proxies."""

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from jobrail.runtime.app import create_app
from jobrail.settings import SettingsError, load_settings
from jobrail.tenants.use_cases import Authenticate
from tests.api.conftest import embedded_settings, migrated
from tests.support.apps import REFERENCE
from tests.support.fixtures import ApiClient

BUDGET = 20  # the default api_limits.auth_failures: 20 per 60 s per client address


@asynccontextmanager
async def _api(tmp_path: Path, **overrides: Any) -> AsyncIterator[ApiClient]:
    app = create_app(await migrated(embedded_settings(tmp_path, **overrides)), modules=REFERENCE)
    client = ApiClient(transport=httpx.ASGITransport(app=app), base_url="http://api")
    client.app = app
    async with app.router.lifespan_context(app), client:
        yield client


def _count_lookups(client: ApiClient) -> Callable[[], int]:
    authenticate: Authenticate = client.app.state.authenticate
    directory: Any = authenticate._directory
    calls = 0
    original = directory.principal_for

    async def counting(key_digest: str) -> Any:
        nonlocal calls
        calls += 1
        return await original(key_digest)

    directory.principal_for = counting
    return lambda: calls


def _bearer(key: str, **extra: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}", **extra}


async def test_wrong_keys_past_the_budget_are_429s_without_a_lookup(tmp_path: Path) -> None:
    async with _api(tmp_path) as api:
        good = await api.key_for("acme")
        assert (await api.get("/jobs", headers=_bearer(good))).status_code == 200
        lookups = _count_lookups(api)

        answers = [
            (await api.get("/jobs", headers=_bearer(f"jr_wrong-key-{n}"))).status_code
            for n in range(BUDGET + 30)
        ]

        assert answers[:BUDGET] == [401] * BUDGET
        assert set(answers[BUDGET:]) == {429}
        assert lookups() == BUDGET
        refused = await api.get("/jobs", headers=_bearer("jr_one-more-wrong-key"))
        assert refused.json()["error"]["code"] == "rate_limited"
        assert int(refused.headers["Retry-After"]) >= 1
        assert refused.headers["X-Request-Id"]
        # A key this process knows to be live is not held up by its neighbour's flood.
        assert (await api.get("/jobs", headers=_bearer(good))).status_code == 200


async def test_clients_with_good_keys_never_use_up_the_budget(tmp_path: Path) -> None:
    async with _api(tmp_path, auth={"key_cache_ttl_s": 0}) as api:
        keys = [await api.key_for(f"t{n}") for n in range(BUDGET + 10)]

        answers = [(await api.get("/jobs", headers=_bearer(key))).status_code for key in keys]

        assert set(answers) == {200}


async def test_a_neighbours_flood_of_wrong_keys_does_not_lock_out_a_key_seen_live(
    tmp_path: Path,
) -> None:
    # key_cache_ttl_s=0: as when the key cache has expired, on every request.
    async with _api(tmp_path, auth={"key_cache_ttl_s": 0}) as api:
        good = await api.key_for("acme")
        assert (await api.get("/jobs", headers=_bearer(good))).status_code == 200
        flood = [
            (await api.get("/jobs", headers=_bearer(f"jr_wrong-{n}"))).status_code
            for n in range(BUDGET + 5)
        ]
        lookups = _count_lookups(api)

        answers = [(await api.get("/jobs", headers=_bearer(good))).status_code for _ in range(5)]

    assert flood[-1] == 429  # the address's budget is spent
    assert answers == [200] * 5
    assert lookups() == 5  # still looked up each time: a revocation would be seen


async def test_a_key_seen_live_and_then_revoked_is_refused_at_once(tmp_path: Path) -> None:
    from jobrail.runtime.app import runtime_of
    from jobrail.tenants.use_cases import CreateTenant, RevokeApiKey

    async with _api(tmp_path, auth={"key_cache_ttl_s": 0}) as api:
        container = runtime_of(api.app).container
        issued = await (await container.get(CreateTenant))("acme")
        assert (await api.get("/jobs", headers=_bearer(issued.api_key))).status_code == 200
        for n in range(BUDGET + 1):
            await api.get("/jobs", headers=_bearer(f"jr_wrong-{n}"))
        await (await container.get(RevokeApiKey))(issued.key_id)

        revoked = await api.get("/jobs", headers=_bearer(issued.api_key))
        again = await api.get("/jobs", headers=_bearer(issued.api_key))

    assert revoked.status_code == 401
    assert again.status_code == 429  # no longer known live: the spent budget applies


async def test_a_burst_with_one_good_key_and_a_cold_cache_is_never_refused(
    tmp_path: Path,
) -> None:
    async with _api(tmp_path) as api:
        key = await api.key_for("acme")
        api.app.state.authenticate.forget()  # as after a restart

        answers = await asyncio.gather(
            *(api.get("/jobs", headers=_bearer(key)) for _ in range(2 * BUDGET))
        )

    assert [r.status_code for r in answers] == [200] * (2 * BUDGET)


async def test_tenants_behind_one_address_do_not_share_an_enqueue_budget(
    tmp_path: Path,
) -> None:
    # The per-IP enqueue rule (300/min) was shared by every tenant behind one NAT.
    async with _api(tmp_path) as api:
        tenants = [_bearer(await api.key_for(f"nat-{n}")) for n in range(11)]
        answers = [
            (await api.post("/demo/echo", json={"message": "m"}, headers=headers)).status_code
            for headers in tenants
            for _ in range(28)
        ]

    assert len(answers) > 300
    assert set(answers) == {202}


def test_a_per_ip_rule_on_authenticated_routes_is_refused_at_start_up(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(
        "JOBRAIL_API_LIMITS__ENQUEUE", '[{"scope": "ip", "limit": 300, "window_s": 60}]'
    )

    with pytest.raises(SettingsError, match="unauthenticated traffic only"):
        load_settings()


async def test_x_forwarded_for_is_ignored_unless_the_peer_is_a_trusted_proxy(
    tmp_path: Path,
) -> None:
    async with _api(tmp_path) as api:
        answers = [
            (
                await api.get(
                    "/jobs", headers=_bearer(f"jr_wrong-{n}", **{"X-Forwarded-For": f"10.0.0.{n}"})
                )
            ).status_code
            for n in range(BUDGET + 1)
        ]
    assert answers[-1] == 429  # one client, however many addresses it claims


async def test_behind_a_trusted_proxy_each_forwarded_client_has_its_own_budget(
    tmp_path: Path,
) -> None:
    # The in-process client connects from 127.0.0.1: the proxy.
    async with _api(tmp_path, api={"trusted_proxies": ["127.0.0.0/8"]}) as api:
        spread = [
            (
                await api.get(
                    "/jobs", headers=_bearer(f"jr_wrong-{n}", **{"X-Forwarded-For": f"10.0.0.{n}"})
                )
            ).status_code
            for n in range(BUDGET + 5)
        ]
        one_client = [
            (
                await api.get(
                    "/jobs",
                    headers=_bearer(f"jr_other-{n}", **{"X-Forwarded-For": "192.0.2.7, 127.0.0.1"}),
                )
            ).status_code
            for n in range(BUDGET + 1)
        ]

    assert set(spread) == {401}
    assert one_client[-1] == 429


async def test_ipv6_clients_share_a_budget_per_64_network(tmp_path: Path) -> None:
    # One host is given a whole /64: per full address, it had unlimited budgets.
    async def attempts(api: ApiClient, addresses: list[str]) -> list[int]:
        return [
            (
                await api.get(
                    "/jobs", headers=_bearer(f"jr_wrong-{n}", **{"X-Forwarded-For": address})
                )
            ).status_code
            for n, address in enumerate(addresses)
        ]

    async with _api(tmp_path, api={"trusted_proxies": ["127.0.0.0/8"]}) as api:
        one_network = await attempts(api, [f"2001:db8:0:1::{n:x}" for n in range(BUDGET + 1)])
        next_network = await attempts(api, ["2001:db8:0:2::1"])
        mapped = await attempts(api, ["::ffff:192.0.2.9"] * BUDGET + ["192.0.2.9"])

    assert one_network[:BUDGET] == [401] * BUDGET
    assert one_network[-1] == 429
    assert next_network == [401]
    assert mapped[-1] == 429  # an IPv4-mapped address is that IPv4 address
