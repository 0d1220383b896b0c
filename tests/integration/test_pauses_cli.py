"""`jobrail pause`, `jobrail resume` and `jobrail pauses` against Postgres: what they write
is what the claim and the admin API see; what they refuse is one line, never a traceback."""

import json
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.support.fixtures import ApiClient
from tests.support.processes import run_jobrail


def ok(env: dict[str, str], *args: str) -> Any:
    done = run_jobrail(env, *args)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


async def test_the_cli_pauses_lists_and_resumes_and_refuses_in_one_line(
    stack_env: dict[str, str], api: ApiClient, engine: AsyncEngine
) -> None:
    paused = ok(stack_env, "pause", "tenant", "acme")
    ok(stack_env, "pause", "queue", "jobs.heavy")
    listed = ok(stack_env, "pauses")["pauses"]
    admin = await api.auth("ops", admin=True)
    seen = (await api.get("/admin/pauses", headers=admin)).json()["items"]
    async with engine.connect() as conn:
        rows = (await conn.execute(text("SELECT scope, value FROM dispatch_pauses"))).all()

    assert (paused["scope"], paused["value"], paused["recalled"]) == ("tenant", "acme", 0)
    assert [(p["scope"], p["value"]) for p in listed] == [
        ("tenant", "acme"),
        ("queue", "jobs.heavy"),
    ]
    assert sorted((p["scope"], p["value"]) for p in seen) == sorted(map(tuple, rows))
    assert ok(stack_env, "resume", "tenant", "acme") == {
        "scope": "tenant",
        "value": "acme",
        "resumed": True,
    }

    refused = [
        run_jobrail(stack_env, "resume", "tenant", "acme"),  # not paused any more
        run_jobrail(stack_env, "pause", "queue", "jobs.nowhere"),
        run_jobrail(stack_env, "pause", "type", "no.such.type"),
        run_jobrail(stack_env, "pause", "planet", "earth"),
    ]
    for answer in refused:
        assert answer.returncode != 0
        assert "Traceback" not in answer.stderr
        assert len(answer.stderr.strip().splitlines()) <= 3, answer.stderr
    assert "not paused" in refused[0].stderr
    assert "no queue 'jobs.nowhere'" in refused[1].stderr
