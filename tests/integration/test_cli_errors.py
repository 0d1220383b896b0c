"""What an operator can type gets a one-line answer and a non-zero exit, never a
traceback: a module that does not load, a database that is not there or not migrated."""

import os
import subprocess
from pathlib import Path

import pytest

from tests.support.processes import BIN, ROOT


def jobrail(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("JOBRAIL_")}
    full_env.update(env)
    return subprocess.run(
        [str(BIN / "jobrail"), *args],
        cwd=ROOT,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize("command", ["api", "worker", "scheduler", "run", "migrate"])
def test_an_unknown_module_is_one_line_naming_it_and_the_installed_ones(
    command: str, tmp_path: Path
) -> None:
    done = jobrail(
        command,
        JOBRAIL_MODE="embedded" if command in ("run", "migrate") else "stack",
        JOBRAIL_MODULES="demo,no_such_module",
        JOBRAIL_DATABASE__URL=f"sqlite+aiosqlite:///{tmp_path}/jobrail.db",
    )

    assert done.returncode != 0
    [line] = done.stderr.strip().splitlines()
    assert "Traceback" not in done.stderr
    assert "JOBRAIL_MODULES names 'no_such_module', which is no installed module" in line
    assert "installed: demo" in line
    assert line.startswith("jobrail: ")


def test_an_import_path_in_jobrail_modules_says_how_to_load_it() -> None:
    done = jobrail("worker", JOBRAIL_MODE="stack", JOBRAIL_MODULES="contexts.billing")

    assert done.returncode == 2
    [line] = done.stderr.strip().splitlines()
    assert "'contexts.billing', which is no installed module" in line
    assert "JobRail(modules=[...])" in line
    assert "--app" in line


@pytest.mark.parametrize("command", ["api", "worker", "scheduler", "run", "migrate", "tenants"])
def test_an_app_that_does_not_import_is_one_line_naming_it(command: str, tmp_path: Path) -> None:
    args = [command, "list"] if command == "tenants" else [command]
    done = jobrail(
        *args,
        JOBRAIL_APP="no_such_package.app:rail",
        JOBRAIL_MODE="embedded" if command in ("run", "migrate", "tenants") else "stack",
        JOBRAIL_DATABASE__URL=f"sqlite+aiosqlite:///{tmp_path}/jobrail.db",
    )

    assert done.returncode == 2
    [line] = done.stderr.strip().splitlines()
    assert "Traceback" not in done.stderr
    assert line.startswith("jobrail: --app 'no_such_package.app:rail': no_such_package.app")
    assert "cannot be imported" in line


def test_tenants_on_a_database_not_migrated_is_one_line_saying_so(tmp_path: Path) -> None:
    done = jobrail(
        "tenants", "create", "acme", JOBRAIL_DATABASE__URL=f"sqlite+aiosqlite:///{tmp_path}/x.db"
    )

    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        "jobrail: the database cannot be used (OperationalError: no such table: tenants); "
        "is it there and migrated (`jobrail migrate`)?"
    ]
    assert done.stdout == ""
