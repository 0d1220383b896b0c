"""`jobrail jobs`, `jobrail dlq` and `jobrail queues` on the real services: what they
show is what the database and RabbitMQ hold, what they do the admin API's use cases do,
and what they refuse is one line, never a traceback."""

import asyncio
import json
import subprocess
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.support.apps import test_jobs
from tests.support.fixtures import ApiClient, settings_from
from tests.support.processes import run_jobrail
from tests.support.rabbit import RabbitProbe
from tests.support.services import wait_for


@pytest.fixture
def admin_env(stack_env: dict[str, str]) -> dict[str, str]:
    return {
        **stack_env,
        "JOBRAIL_APP": "tests.support.apps:test_jobs",
        "JOBRAIL_RETRY__MAX_ATTEMPTS": "1",
    }


@pytest.fixture
def worker_env(admin_env: dict[str, str]) -> dict[str, str]:
    return admin_env


@pytest.fixture
async def ops_api(
    admin_env: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
    make_api: Callable[..., Any],
    rabbit: RabbitProbe,
) -> Any:
    async with make_api(settings_from(admin_env, monkeypatch), test_jobs.modules) as client:
        await client.sign_in("acme")
        yield client


async def jobrail(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return await asyncio.to_thread(run_jobrail, env, *args)


async def answer(env: dict[str, str], *args: str) -> Any:
    done = await jobrail(env, *args, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def refused(done: subprocess.CompletedProcess[str], says: str, *, usage: bool = False) -> None:
    """One line saying `says`; after argparse's usage if `usage`."""
    assert done.returncode != 0, done.stdout
    assert "Traceback" not in done.stderr
    *before, last = done.stderr.strip().splitlines()
    assert says in last, done.stderr
    assert before[0].startswith("usage: jobrail") if usage else not before, done.stderr


async def test_jobs_are_listed_shown_and_redriven_and_the_dlq_redriven_and_purged(
    admin_env: dict[str, str], ops_api: ApiClient, workers: Any
) -> None:
    await workers()
    failed = await ops_api.echo(message="x", fail_times=1)  # one attempt allowed: it fails
    done = await ops_api.echo(message="y")
    await ops_api.wait_status(failed, "failed")
    await ops_api.wait_status(done, "succeeded")

    listed = await answer(admin_env, "jobs", "list")
    only_failed = await answer(admin_env, "jobs", "list", "--status", "failed")
    elsewhere = await answer(admin_env, "jobs", "list", "--tenant", "someone-else")
    on_queue = await answer(admin_env, "jobs", "list", "--queue", "jobs.default", "--limit", "1")
    shown = await answer(admin_env, "jobs", "show", failed)
    table = (await jobrail(admin_env, "jobs", "list")).stdout

    assert [(j["id"], j["tenant_id"]) for j in listed["items"]] == [
        (done, "acme"),
        (failed, "acme"),
    ]
    assert [j["id"] for j in only_failed["items"]] == [failed]
    assert elsewhere == {"items": [], "next_after": None}
    assert [j["id"] for j in on_queue["items"]] == [done]
    assert on_queue["next_after"] is not None
    after = await answer(admin_env, "jobs", "list", "--after", on_queue["next_after"])
    assert [j["id"] for j in after["items"]] == [failed]
    # Created before the newest job's instant: the older one only.
    newest = listed["items"][0]["created_at"]
    before = await answer(admin_env, "jobs", "list", "--before", newest)
    assert [j["id"] for j in before["items"]] == [failed]
    assert (shown["status"], shown["attempts"]) == ("failed", 1)
    assert [e["name"] for e in shown["events"]] == ["enqueued", "started", "failed"]
    header, *rows = table.splitlines()
    assert header.split() == [
        "ID",
        "TYPE",
        "TENANT_ID",
        "QUEUE",
        "STATUS",
        "ATTEMPTS",
        "CREATED_AT",
    ]
    assert [row.split()[4] for row in rows] == ["succeeded", "failed"]

    async def its_letter() -> Any:
        letters = (await answer(admin_env, "dlq", "list"))["items"]
        return [d for d in letters if d["job_id"] == failed] or None

    [letter] = await wait_for(its_letter, what="the failed job's dead letter")
    redriven = await answer(admin_env, "dlq", "redrive", letter["id"])
    assert [(o["id"], o["outcome"]) for o in redriven["items"]] == [(letter["id"], "redriven")]
    again = await ops_api.wait_status(failed, "failed")  # it ran again, and failed again
    assert again["attempts"] == 1

    # A job redriven by id: it runs again with fresh attempts.
    job_redriven = await answer(admin_env, "jobs", "redrive", failed)
    assert job_redriven["id"] == failed
    assert job_redriven["status"] in ("pending", "running", "failed")
    await ops_api.wait_status(failed, "failed")

    queues = {q["queue"]: q for q in (await answer(admin_env, "queues"))["items"]}
    assert queues["jobs.default"]["consumers"] >= 1
    assert "jobs.dlq" in queues

    refused(await jobrail(admin_env, "dlq", "purge"), "add --yes")
    await wait_for(its_letter, what="the job's newest dead letter")
    purged = await answer(admin_env, "dlq", "purge", "--yes")
    assert purged["purged"] >= 1
    assert (await answer(admin_env, "dlq", "list"))["items"] == []


async def test_bad_input_is_one_line_and_a_non_zero_exit(
    admin_env: dict[str, str], ops_api: ApiClient, tmp_path: Path
) -> None:
    nobody = str(uuid.uuid4())
    env = admin_env

    refused(await jobrail(env, "jobs", "show", nobody), f"job {nobody} not found")
    refused(await jobrail(env, "jobs", "redrive", nobody), "not found")
    refused(await jobrail(env, "jobs", "list", "--status", "nope"), "no status 'nope'")
    refused(await jobrail(env, "dlq", "redrive", "nope"), "no dead letter 'nope'")
    # argparse: its usage and one line of error.
    refused(await jobrail(env, "jobs", "show", "not-a-uuid"), "invalid UUID", usage=True)
    refused(await jobrail(env, "jobs", "list", "--limit", "0"), "from 1 to 200", usage=True)
    refused(await jobrail(env, "jobs", "list", "--before", "soon"), "ISO 8601", usage=True)
    refused(await jobrail(env, "jobs", "list", "--after", "x!"), "not a cursor", usage=True)
    refused(await jobrail(env, "jobs", "list", "--colour", "red"), "unrecognized", usage=True)
    refused(await jobrail(env, "jobs"), "required", usage=True)

    unreachable = {**env, "JOBRAIL_DATABASE__URL": "postgresql+asyncpg://postgres@127.0.0.1:1/x"}
    refused(await jobrail(unreachable, "jobs", "list"), "jobrail:")

    sqlite = {"JOBRAIL_DATABASE__URL": f"sqlite+aiosqlite:///{tmp_path / 'j.db'}"}
    assert (await jobrail(sqlite, "migrate")).returncode == 0
    refused(await jobrail(sqlite, "dlq", "list"), "needs the stack's RabbitMQ")
    assert await answer(sqlite, "jobs", "list") == {"items": [], "next_after": None}
