"""Live workers on the real services: a `jobrail worker` process beats into the workers
table, shows in GET /admin/workers and `jobrail workers` with the job it runs, shows
gone a few beats after a SIGKILL, and stopped after a SIGTERM."""

import asyncio
import json
from typing import Any

import pytest

from tests.support.fixtures import ApiClient
from tests.support.processes import run_jobrail
from tests.support.services import wait_for

BEAT_S = "0.3"


@pytest.fixture
def stack_env(stack_env: dict[str, str]) -> dict[str, str]:
    """Short beats, for the workers and for the API and CLI that judge them."""
    return {**stack_env, "JOBRAIL_WORKER__BEAT_INTERVAL_S": BEAT_S}


async def seen(api: ApiClient, admin: dict[str, str]) -> list[dict[str, Any]]:
    response = await api.get("/admin/workers", headers=admin)
    assert response.status_code == 200, response.text
    items: list[dict[str, Any]] = response.json()["items"]
    return items


async def test_a_worker_shows_with_its_running_job_and_goes_when_killed(
    api: ApiClient, workers: Any, stack_env: dict[str, str]
) -> None:
    admin = await api.auth("ops", admin=True)
    worker = await workers()
    job_id = await api.echo(sleep_ms=120_000)

    async def running_it() -> Any:
        items = await seen(api, admin)
        return items if items and job_id in items[0]["running"] else None

    [row] = await wait_for(running_it, timeout=30, what="the worker to run the job")
    cli = run_jobrail(stack_env, "workers", "--json")
    table = run_jobrail(stack_env, "workers")

    assert row["state"] == "alive"
    assert row["queues"]
    assert row["concurrency"] > 0
    assert row["pid"] > 0
    assert row["stopped_at"] is None
    assert cli.returncode == 0, cli.stderr
    [listed] = json.loads(cli.stdout)["workers"]
    assert (listed["id"], listed["state"], listed["running"]) == (row["id"], "alive", [job_id])
    assert table.returncode == 0, table.stderr
    assert table.stdout.splitlines()[0].split()[:3] == ["state", "host", "pid"]
    assert f"alive  {row['host']}" in table.stdout
    assert job_id in table.stdout

    worker.kill()

    async def gone() -> Any:
        items = await seen(api, admin)
        return items if items[0]["state"] == "gone" else None

    [after] = await wait_for(gone, timeout=30, what="the killed worker to show gone")
    assert after["id"] == row["id"]
    assert after["stopped_at"] is None
    gone_listed = run_jobrail(stack_env, "workers", "--state", "gone", "--json")
    alive_listed = run_jobrail(stack_env, "workers", "--state", "alive", "--json")
    assert [w["id"] for w in json.loads(gone_listed.stdout)["workers"]] == [row["id"]]
    assert json.loads(alive_listed.stdout) == {"workers": []}


async def test_a_worker_stopped_with_sigterm_marks_itself_stopped(
    api: ApiClient, workers: Any
) -> None:
    admin = await api.auth("ops", admin=True)
    worker = await workers()
    [row] = await wait_for(lambda: seen(api, admin), timeout=30, what="a beat")

    await asyncio.to_thread(worker.terminate)

    async def stopped() -> Any:
        items = await seen(api, admin)
        return items if items[0]["state"] == "stopped" else None

    [after] = await wait_for(stopped, timeout=30, what="the worker to show stopped")
    assert after["id"] == row["id"]
    assert after["stopped_at"] is not None
    assert after["running"] == []


def test_the_cli_refuses_bad_input_in_one_line(stack_env: dict[str, str]) -> None:
    bad_state = run_jobrail(stack_env, "workers", "--state", "dead")
    no_database = run_jobrail(
        {**stack_env, "JOBRAIL_DATABASE__URL": "postgresql+asyncpg://nobody@127.0.0.1:1/none"},
        "workers",
    )

    for answer in (bad_state, no_database):
        assert answer.returncode != 0
        assert "Traceback" not in answer.stderr
        assert len(answer.stderr.strip().splitlines()) <= 3, answer.stderr
    assert "invalid choice: 'dead'" in bad_state.stderr
