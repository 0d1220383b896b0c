"""What an operator can type gets a one-line answer and a non-zero exit, never a
traceback: a module that does not load, a database that is not there or not migrated."""

import asyncio
import json
import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

from jobrail.store.admin import create_database_if_missing, drop_database
from tests.support.processes import BIN, ROOT
from tests.support.services import PG_SERVER, require


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


@pytest.mark.parametrize(
    "args",
    [
        ["tenants", "list", "--app", "no_such_package.app:rail"],
        ["tenants", "--app", "no_such_package.app:rail", "list"],
    ],
    ids=["after-the-action", "before-the-action"],
)
def test_tenants_takes_app_before_or_after_its_action(args: list[str], tmp_path: Path) -> None:
    done = jobrail(*args, JOBRAIL_DATABASE__URL=f"sqlite+aiosqlite:///{tmp_path}/jobrail.db")

    assert done.returncode == 2
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("jobrail: --app 'no_such_package.app:rail': no_such_package.app")


def test_tenants_on_a_database_not_migrated_is_one_line_saying_so(tmp_path: Path) -> None:
    done = jobrail(
        "tenants", "create", "acme", JOBRAIL_DATABASE__URL=f"sqlite+aiosqlite:///{tmp_path}/x.db"
    )

    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        f"jobrail: the database is not migrated: the SQLite file {tmp_path}/x.db does not "
        "exist (run `jobrail migrate`)"
    ]
    assert done.stdout == ""
    assert not (tmp_path / "x.db").exists()


def test_a_sqlite_url_with_options_is_the_file_it_names(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path}/q.db?timeout=5"
    assert jobrail("migrate", JOBRAIL_DATABASE__URL=url).returncode == 0

    done = jobrail("tenants", "list", JOBRAIL_DATABASE__URL=url)

    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"tenants": []}


# -- a serving process on a database that is not there or not migrated ------------------


@pytest.mark.parametrize("command", ["api", "worker", "scheduler"])
def test_a_sqlite_file_that_is_not_there_is_one_line_naming_it(
    command: str, tmp_path: Path
) -> None:
    missing = tmp_path / "nowhere" / "jobrail.db"
    done = jobrail(
        command,
        # The worker and the scheduler refuse the embedded mode before any database.
        JOBRAIL_MODE="embedded" if command == "api" else "stack",
        JOBRAIL_DATABASE__URL=f"sqlite+aiosqlite:///{missing}",
    )

    assert done.returncode == 1, done.stderr
    assert done.stderr.strip().splitlines() == [
        f"jobrail: the database is not migrated: the SQLite file {missing} does not exist "
        "(run `jobrail migrate`)"
    ]
    assert not missing.exists()


@pytest.fixture
def empty_database() -> Iterator[str]:
    require("postgres")
    url = f"{PG_SERVER}/jobrail_cli_{uuid.uuid4().hex[:8]}"
    asyncio.run(create_database_if_missing(url))
    yield url
    asyncio.run(drop_database(url))


@pytest.mark.parametrize("command", ["api", "worker", "scheduler", "tenants"])
def test_a_database_not_migrated_is_one_line_saying_which_chain(
    command: str, empty_database: str
) -> None:
    args = [command, "list"] if command == "tenants" else [command]
    done = jobrail(*args, JOBRAIL_MODE="stack", JOBRAIL_DATABASE__URL=empty_database)

    assert done.returncode == 1, done.stderr
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("jobrail: the database is not migrated: chain 'jobrail' has no revision")
    assert line.endswith("(run `jobrail migrate`)")


def test_a_database_without_the_apps_chains_names_the_chain_and_the_app(
    empty_database: str,
) -> None:
    migrated = jobrail("migrate", JOBRAIL_DATABASE__URL=empty_database)  # the platform's only
    assert migrated.returncode == 0, migrated.stderr

    done = jobrail(
        "worker",
        "--app",
        "workers.app:rail",
        JOBRAIL_MODE="stack",
        JOBRAIL_DATABASE__URL=empty_database,
    )

    assert done.returncode == 1, done.stderr
    [line] = done.stderr.strip().splitlines()
    assert "chain 'contexts' has no revision yet" in line
    assert line.endswith("(run `jobrail migrate --app workers.app:rail`)")


@pytest.mark.parametrize("command", ["api", "tenants"])
def test_a_postgres_database_that_is_not_there_is_one_line_saying_how_to_make_it(
    command: str,
) -> None:
    require("postgres")
    name = f"jobrail_missing_{uuid.uuid4().hex[:8]}"
    args = [command, "list"] if command == "tenants" else [command]
    done = jobrail(*args, JOBRAIL_MODE="stack", JOBRAIL_DATABASE__URL=f"{PG_SERVER}/{name}")

    assert done.returncode == 1, done.stderr
    assert done.stderr.strip().splitlines() == [
        f'jobrail: cannot use the database: database "{name}" does not exist '
        "(`jobrail migrate --create-database` creates it)"
    ]


def test_a_database_a_newer_jobrail_migrated_is_used_as_it_is(empty_database: str) -> None:
    """A rolling deploy or a rollback: this code's processes still start."""
    assert jobrail("migrate", JOBRAIL_DATABASE__URL=empty_database).returncode == 0

    async def ahead() -> None:
        engine = create_async_engine(empty_database)
        async with engine.begin() as conn:
            await conn.execute(text("UPDATE jobrail_alembic_version SET version_num = '9999'"))
        await engine.dispose()

    asyncio.run(ahead())
    done = jobrail("tenants", "list", JOBRAIL_MODE="stack", JOBRAIL_DATABASE__URL=empty_database)

    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"tenants": []}


def test_an_app_whose_import_fails_is_one_line_naming_the_error(tmp_path: Path) -> None:
    (tmp_path / "broken_app.py").write_text("raise RuntimeError('no config here')\n")
    done = subprocess.run(
        [str(BIN / "jobrail"), "migrate", "--app", "broken_app:rail"],
        cwd=tmp_path,
        env={k: v for k, v in os.environ.items() if not k.startswith("JOBRAIL_")},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "jobrail: --app 'broken_app:rail': importing broken_app failed: "
        "RuntimeError: no config here"
    ]


# -- settings a driver would fail on later, and a file that is no database -------------


@pytest.mark.parametrize(
    ("variable", "url"),
    [
        ("JOBRAIL_DATABASE__URL", "postgresql+asyncpg://root@127.0.0.1:99999/test"),
        ("JOBRAIL_DATABASE__URL", "postgresql+asyncpg://root@127.0.0.1:abc/test"),
        ("JOBRAIL_DATABASE__URL", "postgresql+asyncpg://root@[::1/test"),
        # The message must not show the URL, whose password may be in it.
        ("JOBRAIL_DATABASE__URL", "postgresql+asyncpg://root:cret@127.0.0.1:99999/test"),
        ("JOBRAIL_RABBIT__URL", "amqp://guest:guest@127.0.0.1:0/"),
        ("JOBRAIL_REDIS__URL", "redis://127.0.0.1:70000/0"),
    ],
)
@pytest.mark.parametrize("command", ["migrate", "tenants", "scheduler"])
def test_a_url_whose_port_does_not_parse_is_one_line_naming_the_variable(
    variable: str, url: str, command: str
) -> None:
    args = [command, "list"] if command == "tenants" else [command]
    done = jobrail(*args, JOBRAIL_MODE="stack", **{variable: url})

    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines()[0] == "jobrail: invalid settings:"
    [problem] = done.stderr.strip().splitlines()[1:]
    assert problem.startswith(f"  {variable}: ")
    assert "port" in problem
    assert "cret" not in done.stderr


def test_a_demo_api_key_of_the_wrong_shape_is_one_line_naming_the_variable(
    tmp_path: Path,
) -> None:
    done = jobrail(
        "run",
        JOBRAIL_MODE="embedded",
        JOBRAIL_DEMO_API_KEY="",
        JOBRAIL_DATABASE__URL=f"sqlite+aiosqlite:///{tmp_path}/jobrail.db",
    )

    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        "jobrail: invalid settings:",
        "  JOBRAIL_DEMO_API_KEY: Value error, an API key is 8-256 printable characters "
        "without spaces",
    ]


@pytest.mark.parametrize("args", [["migrate"], ["run"], ["tenants", "list"]])
def test_a_sqlite_file_that_is_no_database_is_one_line_and_left_as_it_was(
    args: list[str], tmp_path: Path
) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("not a database, and it must stay as it is\n" * 20)
    before = notes.read_bytes()

    done = jobrail(
        *args, JOBRAIL_MODE="embedded", JOBRAIL_DATABASE__URL=f"sqlite+aiosqlite:///{notes}"
    )

    assert done.returncode == 1, done.stderr
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("jobrail: cannot ")
    assert line.endswith(": the SQLite file is not a usable database (file is not a database)")
    assert notes.read_bytes() == before


def test_ctrl_c_while_migrating_is_one_line_and_exit_130() -> None:
    """An interrupt before a server or a worker takes over the signals (here: while the
    migration waits for a database that accepts but never answers) stops the command
    without a traceback."""
    import signal
    import socket

    with socket.create_server(("127.0.0.1", 0)) as silent:
        port = silent.getsockname()[1]
        env = {k: v for k, v in os.environ.items() if not k.startswith("JOBRAIL_")}
        env.update(
            JOBRAIL_DATABASE__URL=f"postgresql+asyncpg://root@127.0.0.1:{port}/test",
            JOBRAIL_DATABASE__CONNECT_TIMEOUT_S="120",
        )
        process = subprocess.Popen(
            [str(BIN / "jobrail"), "migrate"],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            # As from a terminal, whatever started this suite: a shell without job
            # control starts its background commands with SIGINT ignored, and the
            # command would inherit that (Python then leaves Ctrl-C ignored).
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
        try:
            silent.settimeout(60)
            connection, _ = silent.accept()  # the command is inside the migration now
            with connection:
                process.send_signal(signal.SIGINT)
                _, stderr = process.communicate(timeout=60)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()

    assert process.returncode == 130, stderr
    assert stderr.strip().splitlines() == ["jobrail: interrupted"]


def test_jobrail_run_with_a_job_type_the_settings_refuse_is_one_line_before_migrating(
    tmp_path: Path,
) -> None:
    # `api`, `worker` and `scheduler` checked the catalog first; `run` migrated, then
    # failed in the app's start-up with a traceback.
    database = tmp_path / "jobrail.db"
    done = jobrail(
        "run",
        "--app",
        "tests.support.host_bad_queue:rail",
        JOBRAIL_MODE="embedded",
        JOBRAIL_DATABASE__URL=f"sqlite+aiosqlite:///{database}",
    )

    assert done.returncode == 2, done.stderr
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("jobrail: ")
    assert "jobs.nope" in line
    assert not database.exists()


@pytest.mark.parametrize("taken", ["port", "host"])
def test_an_address_the_api_cannot_listen_on_is_one_line_before_anything_starts(
    taken: str, tmp_path: Path
) -> None:
    # uvicorn binds after the app's lifespan: the scheduler had led and fired its jobs,
    # and the process ended with a log line and exit 3.
    import socket

    with socket.create_server(("127.0.0.1", 0)) as listening:
        port = listening.getsockname()[1]
        host = "127.0.0.1" if taken == "port" else "no-such-host.invalid"
        done = jobrail(
            "run",
            JOBRAIL_MODE="embedded",
            JOBRAIL_API__HOST=host,
            JOBRAIL_API__PORT=str(port),
            JOBRAIL_DATABASE__URL=f"sqlite+aiosqlite:///{tmp_path}/jobrail.db",
        )

    assert done.returncode == 1, done.stderr
    [line] = done.stderr.strip().splitlines()
    assert line.startswith(f"jobrail: cannot listen on {host}:{port} (JOBRAIL_API__HOST")
    assert "scheduler" not in done.stdout + done.stderr
