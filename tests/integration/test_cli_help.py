"""What `jobrail` says about itself: plain-text help in which every command says what it
does, which settings it reads and how to call it; its version; the line `jobrail
migrate` answers with (the database without its credentials, each chain's revision);
and a usage error, never a traceback, for a command line it cannot take."""

import asyncio
import os
import sqlite3
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

from jobrail.cli import main
from jobrail.store.admin import drop_database
from jobrail.version import __version__
from tests.support.processes import BIN, ROOT
from tests.support.services import require

COMMANDS = ["run", "api", "worker", "scheduler", "migrate", "tenants"]
TENANT_ACTIONS = ["create", "add-key", "revoke-key", "list"]
VERSION_TABLES = {"jobrail": "jobrail_alembic_version", "contexts": "contexts_alembic_version"}


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


@pytest.fixture(autouse=True)
def _no_settings_from_here(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [name for name in os.environ if name.startswith("JOBRAIL_")]:
        monkeypatch.delenv(name)


def help_of(capsys: pytest.CaptureFixture[str], *command: str) -> str:
    with pytest.raises(SystemExit) as exited:
        main([*command, "--help"])
    assert exited.value.code == 0
    out: str = capsys.readouterr().out
    return out


def description_in(help_text: str) -> str:
    """The paragraphs between the usage and the arguments."""
    paragraphs = []
    for paragraph in help_text.split("\n\n")[1:]:
        if paragraph.startswith(("positional arguments:", "options:")):
            break
        paragraphs.append(paragraph)
    return "\n\n".join(paragraphs)


def test_the_help_is_plain_text_and_lists_every_command_with_what_it_does(
    capsys: pytest.CaptureFixture[str],
) -> None:
    shown = help_of(capsys)

    assert "``" not in shown
    assert "The jobrail command" not in shown
    assert "JOBRAIL_" in description_in(shown)
    lines = shown.splitlines()
    for command in COMMANDS:
        # A command's line is indented by four; a description wrapped under it by more.
        [listed] = [line for line in lines if line.startswith(f"    {command} ")]
        assert len(listed.split()) > 2, f"{command} has no help in the list: {listed!r}"


@pytest.mark.parametrize(
    "command", [[c] for c in COMMANDS] + [["tenants", a] for a in TENANT_ACTIONS], ids=" ".join
)
def test_each_command_says_what_it_does_which_settings_it_reads_and_how_to_call_it(
    command: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    shown = help_of(capsys, *command)

    described = description_in(shown)
    assert "``" not in shown
    assert len(described.split()) >= 15, shown
    assert "JOBRAIL_" in described
    example = described.split("example")[-1]
    assert "example" in described
    assert f"jobrail {' '.join(command)}" in example


def test_the_tenants_help_lists_its_actions_with_what_they_do(
    capsys: pytest.CaptureFixture[str],
) -> None:
    lines = help_of(capsys, "tenants").splitlines()

    for action in TENANT_ACTIONS:
        [listed] = [line for line in lines if line.split()[:1] == [action]]
        assert len(listed.split()) > 2, f"{action} has no help in the list: {listed!r}"


def test_version_prints_jobrails_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--version"])

    assert exited.value.code == 0
    assert capsys.readouterr().out == f"jobrail {__version__}\n"


@pytest.mark.parametrize(
    ("args", "error"),
    [
        ([], "the following arguments are required: COMMAND"),
        (["nope"], "invalid choice: 'nope'"),
        (["tenants"], "the following arguments are required: ACTION"),
        (["tenants", "create"], "the following arguments are required: name"),
        (["tenants", "add-key"], "the following arguments are required: name"),
        (["tenants", "revoke-key"], "the following arguments are required: key_id"),
        (["tenants", "revoke-key", "not-a-uuid"], "invalid UUID value: 'not-a-uuid'"),
        (["tenants", "list", "extra"], "unrecognized arguments: extra"),
        (["tenants", "create", "acme", "--admin=yes"], "ignored explicit argument 'yes'"),
        (["migrate", "--bogus"], "unrecognized arguments: --bogus"),
        (["migrate", "--app"], "argument --app: expected one argument"),
        (["--bogus", "migrate"], "unrecognized arguments: --bogus"),
        (["worker", "--max-prefetch", "10"], "unrecognized arguments: --max-prefetch"),
    ],
    ids=lambda value: " ".join(value) if isinstance(value, list) else "",
)
def test_a_command_line_it_cannot_take_is_a_usage_error_and_exit_2(
    args: list[str], error: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(args)

    assert exited.value.code == 2
    written = capsys.readouterr()
    assert written.out == ""
    assert written.err.startswith("usage: jobrail")
    last = written.err.strip().splitlines()[-1]
    assert last.startswith("jobrail")
    assert ": error: " in last
    assert error in last


def test_app_is_taken_before_the_command_too(tmp_path: Path) -> None:
    done = jobrail(
        "--app",
        "no_such_package.app:rail",
        "migrate",
        JOBRAIL_DATABASE__URL=f"sqlite+aiosqlite:///{tmp_path}/jobrail.db",
    )

    assert done.returncode == 2
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("jobrail: --app 'no_such_package.app:rail': no_such_package.app")


def test_taskiq_options_after_a_double_dash_reach_taskiqs_worker() -> None:
    from taskiq.cli.worker.args import WorkerArgs

    from jobrail.cli.parser import _parser
    from jobrail.cli.serving import taskiq_worker_args
    from jobrail.settings import Settings

    args = _parser("JOBRAIL_APP", __version__).parse_args(
        ["worker", "--", "--max-prefetch", "7", "--max-fails", "3"]
    )
    taskiq = WorkerArgs.from_cli(taskiq_worker_args(Settings(), args.taskiq_args))
    assert (taskiq.max_prefetch, taskiq.max_fails) == (7, 3)
    assert taskiq.broker == "jobrail.facade.worker:create_broker"
    assert taskiq.modules == []


# -- jobrail migrate's answer ----------------------------------------------------------


def test_migrate_on_sqlite_names_the_file_and_each_chains_revision(tmp_path: Path) -> None:
    database = tmp_path / "data" / "jobrail.db"
    url = f"sqlite+aiosqlite:///{database}?timeout=5"

    first = jobrail("migrate", "--app", "workers.app:rail", JOBRAIL_DATABASE__URL=url)
    again = jobrail("migrate", "--app", "workers.app:rail", JOBRAIL_DATABASE__URL=url)

    assert first.returncode == 0, first.stderr
    with sqlite3.connect(database) as connection:
        revisions = {
            chain: connection.execute(f"SELECT version_num FROM {table}").fetchone()[0]
            for chain, table in VERSION_TABLES.items()
        }
    line = (
        f"jobrail: database sqlite+aiosqlite:///{database} is up to date "
        f"(jobrail {revisions['jobrail']}, contexts {revisions['contexts']})"
    )
    assert first.stdout.splitlines() == [line]
    assert first.stderr == ""
    assert again.returncode == 0, again.stderr
    assert again.stdout.splitlines() == [line]


@pytest.fixture
def database_name() -> Iterator[str]:
    require("postgres")
    name = f"jobrail_cli_{uuid.uuid4().hex[:8]}"
    yield name
    asyncio.run(drop_database(f"postgresql+asyncpg://postgres@127.0.0.1:5432/{name}"))


def test_migrate_on_postgres_names_the_database_without_its_credentials(
    database_name: str,
) -> None:
    # The server trusts loopback connections, so the password is only there to be hidden.
    url = f"postgresql+asyncpg://postgres:s3cret-pw@127.0.0.1:5432/{database_name}"

    done = jobrail(
        "migrate",
        "--create-database",
        "--app",
        "workers.app:rail",
        JOBRAIL_MODE="stack",
        JOBRAIL_DATABASE__URL=url,
    )

    assert done.returncode == 0, done.stderr
    revisions = asyncio.run(_revisions(url))
    assert done.stdout.splitlines() == [
        f"jobrail: database postgresql+asyncpg://127.0.0.1:5432/{database_name} is up to "
        f"date (jobrail {revisions['jobrail']}, contexts {revisions['contexts']})"
    ]
    assert "s3cret-pw" not in done.stdout + done.stderr
    assert "postgres@" not in done.stdout + done.stderr


async def _revisions(url: str) -> dict[str, str]:
    engine = create_async_engine(url)
    try:
        async with engine.connect() as connection:
            return {
                chain: (
                    await connection.execute(text(f"SELECT version_num FROM {table}"))
                ).scalar_one()
                for chain, table in VERSION_TABLES.items()
            }
    finally:
        await engine.dispose()
