"""`jobrail tenants ...` against Postgres, and the keys it prints used on the stack API."""

import json
import subprocess
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.support.fixtures import ApiClient
from tests.support.processes import run_jobrail


def jobrail(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return run_jobrail(env, "tenants", *args)


def ok(env: dict[str, str], *args: str) -> Any:
    done = jobrail(env, *args)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


async def test_keys_made_by_the_cli_open_the_api_until_revoked(
    stack_env: dict[str, str], api: ApiClient, engine: AsyncEngine
) -> None:
    acme = ok(stack_env, "create", "acme")
    ops = ok(stack_env, "create", "ops", "--admin")
    second = ok(stack_env, "add-key", "acme")

    assert set(acme) == {"tenant_id", "api_key", "key_id", "admin"}
    assert (acme["tenant_id"], acme["admin"], ops["admin"]) == ("acme", False, True)
    assert acme["api_key"].startswith("jr_")
    assert len(acme["api_key"]) > 40
    async with engine.connect() as conn:
        stored = (await conn.execute(text("SELECT digest, hint FROM api_keys"))).all()
    assert len(stored) == 4  # and the test client's own
    assert all(acme["api_key"] not in (digest, hint) for digest, hint in stored)

    first_headers = {"Authorization": f"Bearer {acme['api_key']}"}
    second_headers = {"Authorization": f"Bearer {second['api_key']}"}
    job_id = await api.echo(headers=first_headers)
    assert (await api.get(f"/jobs/{job_id}", headers=second_headers)).status_code == 200

    revoked = ok(stack_env, "revoke-key", acme["key_id"])
    listed = ok(stack_env, "list")["tenants"]

    assert revoked["tenant_id"] == "acme"
    assert {t["tenant_id"]: [k["revoked"] for k in t["keys"]] for t in listed} == {
        "acme": [True, False],
        "default": [False],  # the test client's own tenant
        "ops": [False],
    }
    api.app.state.authenticate.forget()  # the API trusts what it learnt for a few seconds
    assert (await api.get(f"/jobs/{job_id}", headers=first_headers)).status_code == 401
    assert (await api.get(f"/jobs/{job_id}", headers=second_headers)).status_code == 200


async def test_the_cli_refuses_a_taken_or_malformed_name_with_a_message(
    stack_env: dict[str, str], engine: AsyncEngine
) -> None:
    ok(stack_env, "create", "acme")

    taken = jobrail(stack_env, "create", "acme")
    malformed = jobrail(stack_env, "create", "Not A Name")

    assert taken.returncode == 1
    assert "tenant 'acme' already exists" in taken.stderr
    assert malformed.returncode == 1
    assert "tenant name 'Not A Name' is invalid" in malformed.stderr
    assert taken.stdout == malformed.stdout == ""


async def test_the_cli_sets_and_removes_a_tenants_cap_and_refuses_bad_ones_in_a_line(
    stack_env: dict[str, str], api: ApiClient
) -> None:
    capped = ok(stack_env, "create", "capped")
    headers = {"Authorization": f"Bearer {capped['api_key']}"}

    assert ok(stack_env, "set-cap", "capped", "1") == {"tenant_id": "capped", "max_queued": 1}
    listed = {t["tenant_id"]: t["max_queued"] for t in ok(stack_env, "list")["tenants"]}
    assert listed["capped"] == 1
    assert ok(stack_env, "set-cap", "capped", "none")["max_queued"] is None
    assert (await api.post("/demo/echo", json={"message": "c"}, headers=headers)).status_code == 202

    bad = jobrail(stack_env, "set-cap", "capped", "lots")
    zero = jobrail(stack_env, "set-cap", "capped", "0")
    nobody = jobrail(stack_env, "set-cap", "nobody", "5")
    for refused in (bad, zero, nobody):
        assert refused.returncode != 0
        assert "Traceback" not in refused.stderr
        assert len(refused.stderr.strip().splitlines()) <= 3, refused.stderr
    assert "max_queued must be" in zero.stderr
    assert "not found" in nobody.stderr


def test_set_weight_sets_and_resets_a_tenant_s_share_and_refuses_bad_values(
    stack_env: dict[str, str],
) -> None:
    ok(stack_env, "create", "heavy")

    assert ok(stack_env, "set-weight", "heavy", "3") == {"tenant_id": "heavy", "weight": 3.0}
    listed = {t["tenant_id"]: t["weight"] for t in ok(stack_env, "list")["tenants"]}
    assert listed["heavy"] == 3.0
    assert ok(stack_env, "set-weight", "heavy", "none")["weight"] is None

    refused = [
        jobrail(stack_env, "set-weight", "heavy", value) for value in ("lots", "0", "nan", "1e9")
    ]
    nobody = jobrail(stack_env, "set-weight", "nobody", "2")
    for answer in (*refused, nobody):
        assert answer.returncode != 0
        assert "Traceback" not in answer.stderr
        assert len(answer.stderr.strip().splitlines()) <= 3, answer.stderr
    assert "weight must be" in refused[1].stderr
    assert "weight must be" in refused[2].stderr  # NaN is no weight
    assert "not found" in nobody.stderr
