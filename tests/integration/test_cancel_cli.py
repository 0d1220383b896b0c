"""`jobrail jobs cancel` against Postgres: one job by its id, or every job a filter takes;
what it refuses is one line, never a traceback."""

import json
from datetime import UTC, datetime

from tests.support.fixtures import ApiClient
from tests.support.processes import run_jobrail


async def _pending(api: ApiClient, count: int, tenant: str) -> list[str]:
    """Jobs that stay pending: no worker runs here."""
    return [await api.enqueue("demo.echo", {"message": f"m{n}"}, tenant) for n in range(count)]


async def _statuses(api: ApiClient, ids: list[str], tenant: str) -> set[str]:
    headers = await api.auth(tenant)
    return {(await api.job(job_id, headers))["status"] for job_id in ids}


async def test_the_cli_cancels_one_job_or_a_tenants_jobs_of_a_type(
    stack_env: dict[str, str], api: ApiClient
) -> None:
    [one] = await _pending(api, 1, "acme")
    globex = await _pending(api, 2, "globex")
    acme = await _pending(api, 2, "acme")

    single = run_jobrail(stack_env, "jobs", "cancel", one, "--json")
    bulk = run_jobrail(stack_env, "jobs", "cancel", "--type", "demo.echo", "--tenant", "globex")

    assert single.returncode == 0, single.stderr
    assert json.loads(single.stdout) == {
        "job_id": one,
        "status": "cancelled",
        "cancel_requested": False,
    }
    assert bulk.returncode == 0, bulk.stderr
    assert bulk.stdout.strip() == "cancelled 2 jobs; asked 0 running jobs to stop"
    assert await _statuses(api, globex, "globex") == {"cancelled"}
    assert "cancelled" not in await _statuses(api, acme, "acme")

    cut = datetime.now(UTC).isoformat()
    rest = run_jobrail(
        stack_env, "jobs", "cancel", "--status", "pending", "--before", cut, "--json"
    )

    assert rest.returncode == 0, rest.stderr
    assert json.loads(rest.stdout) == {"cancelled": 2, "stopping": 0}
    assert await _statuses(api, acme, "acme") == {"cancelled"}


async def test_the_cli_refuses_bad_input_in_one_line(
    stack_env: dict[str, str], api: ApiClient
) -> None:
    [done] = await _pending(api, 1, "acme")
    assert run_jobrail(stack_env, "jobs", "cancel", done).returncode == 0

    refused = {
        "cannot cancel job": run_jobrail(stack_env, "jobs", "cancel", done),
        "not found": run_jobrail(
            stack_env, "jobs", "cancel", "0190f5d2-7a4c-7c6e-9d35-1b2c3d4e5f60"
        ),
        "give a job id or filters": run_jobrail(stack_env, "jobs", "cancel"),
        "not both": run_jobrail(stack_env, "jobs", "cancel", done, "--type", "demo.echo"),
        "at least one of": run_jobrail(stack_env, "jobs", "cancel", "--tenant", "acme"),
        "invalid UUID": run_jobrail(stack_env, "jobs", "cancel", "nope"),
        "not an ISO 8601 time": run_jobrail(stack_env, "jobs", "cancel", "--before", "today"),
        "invalid choice": run_jobrail(stack_env, "jobs", "cancel", "--status", "succeeded"),
    }
    for says, answer in refused.items():
        assert answer.returncode != 0, says
        assert "Traceback" not in answer.stderr
        # One line says what is wrong (argparse prints its usage above its own).
        last = answer.stderr.strip().splitlines()[-1]
        assert last.startswith("jobrail"), answer.stderr
        assert says in last, answer.stderr
