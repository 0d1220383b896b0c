"""The ops page's sessions live in Postgres, so every API replica knows them: a session
made on one replica opens the page on another, and signing out or revoking the key on one
ends it on all of them at once (no replica's key cache keeps it alive)."""

import re
from collections.abc import Callable
from typing import Any

from jobrail.runtime.app import runtime_of
from jobrail.settings import AuthSettings, Settings
from jobrail.tenants.use_cases import CreateTenant, RevokeApiKey
from tests.support.fixtures import ApiClient
from tests.support.rabbit import RabbitProbe

CSRF = re.compile(r'name=csrf_token value="([^"]+)"')


async def _sign_in(replica: ApiClient, key: str) -> str:
    form = await replica.get("/ops")
    csrf = CSRF.search(form.text)
    assert csrf, form.text
    response = await replica.post("/ops/login", data={"api_key": key, "csrf_token": csrf[1]})
    assert response.status_code == 303, response.text
    return str(response.cookies["jobrail_ops"])


async def _page(replica: ApiClient, token: str) -> Any:
    return await replica.get("/ops", headers={"Cookie": f"jobrail_ops={token}"})


async def test_sessions_are_shared_by_replicas_and_end_on_all_of_them(
    stack_settings: Settings, rabbit: RabbitProbe, make_api: Callable[[Settings], Any]
) -> None:
    # Key caches longer than the test: only the session store can end a session.
    settings = stack_settings.model_copy(update={"auth": AuthSettings(key_cache_ttl_s=3600)})
    async with make_api(settings) as one, make_api(settings) as two:
        for replica in (one, two):
            del replica.headers["Authorization"]
            replica.cookies.clear()
        create = await runtime_of(one.app).container.get(CreateTenant)
        first, second = await create("ops", admin=True), await create("ops2", admin=True)

        token = await _sign_in(one, first.api_key)
        on_two = await _page(two, token)
        two_page = CSRF.search(on_two.text)
        assert on_two.status_code == 200
        assert two_page
        signed_out = await two.post(
            "/ops/logout",
            data={"csrf_token": two_page[1]},
            headers={"Cookie": f"jobrail_ops={token}"},
        )
        after_sign_out = await _page(one, token)

        other = await _sign_in(two, second.api_key)
        assert (await _page(one, other)).status_code == 200
        await (await runtime_of(one.app).container.get(RevokeApiKey))(second.key_id)
        after_revoke = [(await _page(replica, other)).status_code for replica in (one, two)]

    assert signed_out.status_code == 303
    assert after_sign_out.status_code == 401
    assert after_revoke == [401, 401]
