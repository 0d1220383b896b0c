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


@pytest.mark.parametrize("command", ["api", "worker", "scheduler", "run"])
def test_a_module_that_does_not_load_is_one_line_naming_it(command: str, tmp_path: Path) -> None:
    done = jobrail(
        command,
        JOBRAIL_MODE="embedded" if command == "run" else "stack",
        JOBRAIL_MODULES="jobrail.demo,no_such_package.jobs",
        JOBRAIL_DATABASE__URL=f"sqlite+aiosqlite:///{tmp_path}/jobrail.db",
    )

    assert done.returncode != 0
    [line] = done.stderr.strip().splitlines()
    assert "Traceback" not in done.stderr
    assert "'no_such_package.jobs' cannot be imported" in line
    assert line.startswith("jobrail: ")


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
