"""The ops page's sign-in: a server-side session bound to the admin key it was made with.

It ends at sign-out and at the key's revocation at once (whatever the key cache keeps), at
its server-side expiry whatever the browser keeps, cannot be forged from what the
database holds, and every POST wants its CSRF token. Every /ops response carries the
security headers. (The browser test, tests/e2e/test_ops_page.py, signs in through the
form; tests/integration/test_ops_session_replicas.py shares sessions across replicas.)
"""

import asyncio
import hashlib
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import func, select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from jobrail.kernel.clock import SystemClock
from jobrail.runtime.app import create_app, runtime_of
from jobrail.store.tables import api_keys, ops_sessions
from jobrail.tenants.use_cases import CreateTenant, IssuedKey, RevokeApiKey
from tests.api.conftest import embedded_settings, migrated
from tests.support.apps import REFERENCE

CSRF = re.compile(r'name=csrf_token value="([^"]+)"')


@dataclass
class Ops:
    app: Any
    browser: httpx.AsyncClient  # keeps cookies, as a browser does
    engine: AsyncEngine

    async def admin(self, name: str = "ops") -> IssuedKey:
        create = await runtime_of(self.app).container.get(CreateTenant)
        return await create(name, admin=True)

    async def tenant(self, name: str = "acme") -> IssuedKey:
        create = await runtime_of(self.app).container.get(CreateTenant)
        return await create(name)

    async def revoke(self, issued: IssuedKey) -> None:
        await (await runtime_of(self.app).container.get(RevokeApiKey))(issued.key_id)

    async def sign_in(self, key: str) -> str:
        """Sign in through the form as a browser does; the session token it was given."""
        form = await self.browser.get("/ops")
        assert form.status_code == 401
        response = await self.browser.post(
            "/ops/login", data={"api_key": key, "csrf_token": _csrf(form)}
        )
        assert response.status_code == 303, response.text
        token = self.browser.cookies.get("jobrail_ops", path="/ops")
        assert token
        return str(token)

    async def sessions(self) -> list[Any]:
        async with self.engine.connect() as conn:
            return list((await conn.execute(select(ops_sessions))).all())


def _csrf(page: httpx.Response) -> str:
    match = CSRF.search(page.text)
    assert match, page.text
    return match.group(1)


def _with_session(token: str) -> dict[str, str]:
    """A request replaying a session token, as a copied cookie would be."""
    return {"Cookie": f"jobrail_ops={token}"}


@asynccontextmanager
async def _ops(tmp_path: Path, **overrides: object) -> AsyncIterator[Ops]:
    app = create_app(await migrated(embedded_settings(tmp_path, **overrides)), modules=REFERENCE)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://api") as c,
    ):
        engine = await runtime_of(app).container.get(AsyncEngine)
        yield Ops(app, c, engine)


@pytest.fixture
async def ops(tmp_path: Path) -> AsyncIterator[Ops]:
    # A key cache far longer than any test: what ends a session must not be the cache.
    async with _ops(tmp_path, auth={"key_cache_ttl_s": 3600}) as running:
        yield running


async def test_signing_in_starts_a_session_whose_cookie_is_neither_the_key_nor_a_stored_value(
    ops: Ops,
) -> None:
    admin = await ops.admin()

    token = await ops.sign_in(admin.api_key)
    page = await ops.browser.get("/ops")

    assert page.status_code == 200
    assert 'id="jobs"' in page.text or "id=jobs" in page.text
    assert "id=sign-out" in page.text
    assert admin.api_key not in page.text
    async with ops.engine.connect() as conn:
        stored = set((await conn.execute(select(api_keys.c.digest))).scalars())
    [session] = await ops.sessions()
    assert session.key_id == admin.key_id
    assert session.digest == hashlib.sha256(token.encode()).hexdigest()
    assert token not in stored | {session.digest}
    assert token != hashlib.sha256(admin.api_key.encode()).hexdigest()


async def test_what_the_database_holds_does_not_open_the_page(ops: Ops) -> None:
    admin = await ops.admin()
    await ops.sign_in(admin.api_key)
    [session] = await ops.sessions()
    ops.browser.cookies.clear()
    key_digest = hashlib.sha256(admin.api_key.encode()).hexdigest()  # what api_keys holds

    for forged in (key_digest, session.digest, "x" * 43):
        response = await ops.browser.get("/ops", headers=_with_session(forged))
        assert response.status_code == 401, forged
        assert "id=api_key" in response.text  # the sign-in form


async def test_signing_out_ends_the_session_on_the_server(ops: Ops) -> None:
    admin = await ops.admin()
    token = await ops.sign_in(admin.api_key)
    page = await ops.browser.get("/ops")

    out = await ops.browser.post("/ops/logout", data={"csrf_token": _csrf(page)})

    assert out.status_code == 303
    assert await ops.sessions() == []
    ops.browser.cookies.clear()
    replayed = await ops.browser.get("/ops", headers=_with_session(token))
    assert replayed.status_code == 401


async def test_revoking_the_key_ends_its_sessions_at_once(ops: Ops) -> None:
    admin, other = await ops.admin("ops"), await ops.admin("ops2")
    token = await ops.sign_in(admin.api_key)
    ops.browser.cookies.clear()
    other_token = await ops.sign_in(other.api_key)
    ops.browser.cookies.clear()
    assert (await ops.browser.get("/ops", headers=_with_session(token))).status_code == 200

    await ops.revoke(admin)

    # The next request, well inside the hour the key cache would have trusted the key.
    assert (await ops.browser.get("/ops", headers=_with_session(token))).status_code == 401
    assert (await ops.browser.get("/ops", headers=_with_session(other_token))).status_code == 200


async def test_a_session_ends_on_the_server_when_its_time_is_up(tmp_path: Path) -> None:
    async with _ops(tmp_path, ops={"session_ttl_s": 2}) as ops:
        admin = await ops.admin()
        token = await ops.sign_in(admin.api_key)
        [session] = await ops.sessions()
        ops.browser.cookies.clear()
        if SystemClock().now() < session.expires_at - timedelta(seconds=1):
            alive = await ops.browser.get("/ops", headers=_with_session(token))
            assert alive.status_code == 200

        # Replayed by a client that ignores the cookie's Max-Age: the server says no.
        while SystemClock().now() <= session.expires_at:
            await asyncio.sleep(0.1)
        expired = await ops.browser.get("/ops", headers=_with_session(token))

    assert session.expires_at - session.created_at == timedelta(seconds=2)
    assert expired.status_code == 401


async def test_signing_in_removes_expired_sessions(ops: Ops) -> None:
    admin = await ops.admin()
    await ops.sign_in(admin.api_key)
    async with ops.engine.begin() as conn:
        await conn.execute(update(ops_sessions).values(expires_at=SystemClock().now()))
    ops.browser.cookies.clear()

    await ops.sign_in(admin.api_key)

    async with ops.engine.connect() as conn:
        count = (await conn.execute(select(func.count()).select_from(ops_sessions))).scalar()
    assert count == 1


async def test_sign_in_without_its_csrf_token_is_refused_and_starts_no_session(ops: Ops) -> None:
    admin = await ops.admin()
    form = await ops.browser.get("/ops")
    csrf = _csrf(form)

    missing = await ops.browser.post("/ops/login", data={"api_key": admin.api_key})
    wrong = await ops.browser.post(
        "/ops/login", data={"api_key": admin.api_key, "csrf_token": "x" * 43}
    )
    ops.browser.cookies.delete("jobrail_ops_login", path="/ops")
    # A page of another site can post the field but cannot make the browser send the cookie.
    without_cookie = await ops.browser.post(
        "/ops/login", data={"api_key": admin.api_key, "csrf_token": csrf}
    )

    for refused in (missing, wrong, without_cookie):
        assert refused.status_code == 403
        assert "jobrail_ops=" not in refused.headers.get("set-cookie", "")
        assert "id=api_key" in refused.text  # a fresh form to try again
    assert await ops.sessions() == []


async def test_a_post_the_browser_says_came_from_another_site_is_refused(ops: Ops) -> None:
    admin = await ops.admin()
    form = await ops.browser.get("/ops")

    login = await ops.browser.post(
        "/ops/login",
        data={"api_key": admin.api_key, "csrf_token": _csrf(form)},
        headers={"Sec-Fetch-Site": "cross-site"},
    )
    assert login.status_code == 403
    assert await ops.sessions() == []

    await ops.sign_in(admin.api_key)
    page = await ops.browser.get("/ops")
    logout = await ops.browser.post(
        "/ops/logout", data={"csrf_token": _csrf(page)}, headers={"Sec-Fetch-Site": "same-site"}
    )
    assert logout.status_code == 403
    assert len(await ops.sessions()) == 1


async def test_sign_out_without_its_csrf_token_is_refused_and_the_session_goes_on(
    ops: Ops,
) -> None:
    admin = await ops.admin()
    token = await ops.sign_in(admin.api_key)

    missing = await ops.browser.post("/ops/logout")
    other = await ops.browser.post("/ops/logout", data={"csrf_token": "0" * 64})

    assert missing.status_code == other.status_code == 403
    ops.browser.cookies.clear()
    assert (await ops.browser.get("/ops", headers=_with_session(token))).status_code == 200
    assert len(await ops.sessions()) == 1


async def test_every_ops_response_carries_the_security_headers(ops: Ops) -> None:
    admin = await ops.admin()
    tenant = await ops.tenant()
    form = await ops.browser.get("/ops")
    bad_key = await ops.browser.post(
        "/ops/login", data={"api_key": "jr_not-a-key", "csrf_token": _csrf(form)}
    )
    login = await ops.browser.post(
        "/ops/login", data={"api_key": admin.api_key, "csrf_token": _csrf(form)}
    )
    page = await ops.browser.get("/ops")
    logout = await ops.browser.post("/ops/logout", data={"csrf_token": _csrf(page)})
    by_bearer = await ops.browser.get("/ops", headers={"Authorization": f"Bearer {admin.api_key}"})
    not_admin = await ops.browser.get("/ops", headers={"Authorization": f"Bearer {tenant.api_key}"})

    statuses = [r.status_code for r in (form, bad_key, login, page, logout, by_bearer, not_admin)]
    assert statuses == [401, 401, 303, 200, 303, 200, 403]
    for response in (form, bad_key, login, page, logout, by_bearer, not_admin):
        csp = response.headers["Content-Security-Policy"]
        assert "default-src 'none'" in csp
        assert "frame-ancestors 'none'" in csp
        assert "form-action 'self'" in csp
        # Scripts, styles and requests: the console's own (/ops/static, this origin).
        assert "script-src 'self'" in csp
        assert "style-src 'self'" in csp
        assert "unsafe-inline" not in csp
        assert "unsafe-eval" not in csp
        assert response.headers["X-Frame-Options"] == "DENY"
        assert response.headers["Cache-Control"] == "no-store"
        assert response.headers["X-Content-Type-Options"] == "nosniff"
    # Nothing inline: the one stylesheet and the one script are files of /ops/static.
    assert "<style" not in page.text
    assert re.findall(r"<script[^>]*>", page.text) == [
        '<script src="/ops/static/htmx.min.js" defer>'
    ]
    assert 'rel="stylesheet" href="/ops/static/console.css"' in page.text
    assert " style=" not in page.text
    assert "id=sign-out" not in by_bearer.text  # a Bearer key has no session to end


async def test_the_session_cookie_is_http_only_strict_and_scoped_to_ops(ops: Ops) -> None:
    admin = await ops.admin()
    form = await ops.browser.get("/ops")
    login = await ops.browser.post(
        "/ops/login", data={"api_key": admin.api_key, "csrf_token": _csrf(form)}
    )

    cookies = login.headers.get_list("set-cookie")
    [session] = [c for c in cookies if c.startswith("jobrail_ops=")]
    assert "HttpOnly" in session
    assert "SameSite=strict" in session or "SameSite=Strict" in session
    assert "Path=/ops" in session
    assert "Max-Age=28800" in session
    [login_cookie] = [c for c in form.headers.get_list("set-cookie") if "jobrail_ops_login=" in c]
    assert "HttpOnly" in login_cookie
    assert "Path=/ops" in login_cookie


@pytest.mark.parametrize(
    "path",
    [
        "/ops",
        "/ops/jobs/00000000-0000-0000-0000-000000000000",
        "/ops/flows/00000000-0000-0000-0000-000000000000",
    ],
)
async def test_every_console_page_answers_the_sign_in_page_until_an_admin_signs_in(
    ops: Ops, path: str
) -> None:
    admin = await ops.admin()
    tenant = await ops.tenant()

    anonymous = await ops.browser.get(path)
    ended = await ops.browser.get(path, headers=_with_session("x" * 43))
    not_admin = await ops.browser.get(path, headers={"Authorization": f"Bearer {tenant.api_key}"})
    by_admin = await ops.browser.get(path, headers={"Authorization": f"Bearer {admin.api_key}"})

    assert [anonymous.status_code, ended.status_code, not_admin.status_code] == [401, 401, 403]
    for refused in (anonymous, ended, not_admin):
        assert "name=api_key" in refused.text  # the sign-in form, and nothing of the page
        assert refused.headers["Cache-Control"] == "no-store"

    # A session cookie that is not (or no longer) a session is deleted.
    def set_cookies(response: httpx.Response) -> list[str]:
        return [c.split("=", 1)[0] for c in response.headers.get_list("set-cookie")]

    assert set_cookies(anonymous) == ["jobrail_ops_login"]
    assert 'jobrail_ops=""' in ended.headers.get_list("set-cookie")[-1]
    assert by_admin.status_code == (200 if path == "/ops" else 404)


async def test_the_console_mounted_under_a_prefix_signs_in_and_links_under_it(
    tmp_path: Path,
) -> None:
    # README: jobrail's whole API, ops routes included, can be mounted in a host's app.
    # The form posted to /ops/login, the redirect went to /ops and the cookies were for
    # /ops: nobody could sign in under the prefix.
    from fastapi import FastAPI

    jobrail_app = create_app(await migrated(embedded_settings(tmp_path)), modules=REFERENCE)
    host = FastAPI(lifespan=jobrail_app.router.lifespan_context)
    host.mount("/jobrail", jobrail_app)
    async with (
        host.router.lifespan_context(host),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=host), base_url="http://h") as c,
    ):
        create = await runtime_of(jobrail_app).container.get(CreateTenant)
        admin = await create("ops", admin=True)

        form = await c.get("/jobrail/ops")
        assert form.status_code == 401
        assert 'action="/jobrail/ops/login"' in form.text
        signed_in = await c.post(
            "/jobrail/ops/login", data={"api_key": admin.api_key, "csrf_token": _csrf(form)}
        )
        assert signed_in.status_code == 303, signed_in.text
        assert signed_in.headers["location"] == "/jobrail/ops"
        assert c.cookies.get("jobrail_ops", path="/jobrail/ops")
        page = await c.get("/jobrail/ops")

    assert page.status_code == 200, page.text
    assert "id=sign-out" in page.text
    assert 'action="/jobrail/ops/logout"' in page.text
    assert 'href="/ops' not in page.text
