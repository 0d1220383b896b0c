"""Every route family answers 503 with Retry-After, never a 500, while the real Postgres
shuts down and while it is stopped.

Shutting down is held open with a "smart" shutdown, which waits for the sessions it
has: one of this test's own keeps it waiting. Meanwhile Postgres refuses every new
session with "the database system is shutting down" (SQLSTATE 57P03, which is also what
it answers while starting up or in recovery), and the API's pooled sessions are ended
as a fast shutdown ends them ("terminating connection due to administrator command",
57P01). SQLAlchemy wraps both in a plain DBAPIError, which the API answered with 500.
Then the last session goes, Postgres stops, and connecting is refused.
"""

import asyncio
from collections.abc import Iterator
from typing import Any

import asyncpg
import pytest

from tests.faults.conftest import in_thread
from tests.integration.test_database_away_routes import ROUTES, Form, filled
from tests.support.fixtures import ApiClient
from tests.support.services import begin_smart_postgres_stop, start_postgres, wait_for

SERVER = "postgresql://postgres@127.0.0.1:5432"


@pytest.fixture
def postgres_restored() -> Iterator[None]:
    try:
        yield
    finally:
        start_postgres()


async def _answers(api: ApiClient, admin: dict[str, str]) -> dict[tuple[str, str], Any]:
    """Each route's status and Retry-After, where it is not the 503 expected."""
    wrong = {}
    for method, path, body, as_admin in ROUTES:
        # The console's forms post form fields (a confirmed action reaches the database).
        sent = {"data": body} if isinstance(body, Form) else {"json": body}
        path = filled(path)
        response = await api.request(method, path, headers=admin if as_admin else None, **sent)
        answer = (response.status_code, response.headers.get("Retry-After"))
        if answer != (503, "5"):
            wrong[(method, path)] = (*answer, response.text[:200])
    return wrong


async def test_every_route_family_answers_503_while_postgres_shuts_down_and_when_stopped(
    api: ApiClient, stack_env: dict[str, str], postgres_restored: None
) -> None:
    database = stack_env["JOBRAIL_DATABASE__URL"].rsplit("/", 1)[1]
    admin = await api.auth("ops-admin", admin=True)
    assert (await api.get("/jobs")).status_code == 200  # both keys looked up, and kept
    assert (await api.get("/jobs", headers=admin)).status_code == 200

    holder = await asyncpg.connect(f"{SERVER}/postgres")
    stopping = begin_smart_postgres_stop()  # waits for `holder`
    try:

        async def refusing_as_shutting_down() -> bool:
            try:
                connection = await asyncpg.connect(f"{SERVER}/{database}")
            except asyncpg.CannotConnectNowError:
                return True
            await connection.close()
            return False

        await wait_for(refusing_as_shutting_down, timeout=30, what="Postgres to shut down")
        await holder.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = $1 AND pid <> pg_backend_pid()",
            database,
        )
        assert await _answers(api, admin) == {}
        assert (await api.get("/health")).status_code == 200
    finally:
        await holder.close()  # the last session: Postgres stops
        await in_thread(stopping.wait, 60)

    assert await _answers(api, admin) == {}
    assert (await api.get("/ready")).status_code == 503

    await in_thread(start_postgres)
    await asyncio.sleep(0.5)
    assert (await api.get("/jobs")).status_code == 200
