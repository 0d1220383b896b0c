"""The built wheel migrates a database on its own: installed into a fresh virtualenv outside
the repository, `jobrail migrate` finds the platform's chain inside the package.

The virtualenv gets the wheel alone (no dependencies, no index); it reaches the test
environment's installed dependencies through a .pth file, so nothing is downloaded. A path
in a .pth file does not run that directory's own .pth files, so the repository's editable
install of jobrail stays out of it."""

import asyncio
import importlib.util
import os
import subprocess
import sys
import sysconfig
import uuid
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

import jobrail
from jobrail.persistence.admin import create_database_if_missing, drop_database
from tests.support.schema import PLATFORM_TABLES, tables
from tests.support.services import PG_SERVER, require

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _run(*argv: str | Path, cwd: Path, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        [str(arg) for arg in argv],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bin/ directory of a fresh virtualenv with the built wheel installed."""
    work = tmp_path_factory.mktemp("wheel")
    # With hatchling in the test environment (the dev extra) pip builds with it; without
    # it pip installs the build backend into an isolated build environment.
    isolation = ["--no-build-isolation"] if importlib.util.find_spec("hatchling") else []
    _run(
        sys.executable,
        "-m",
        "pip",
        "wheel",
        "--no-deps",
        *isolation,
        "--wheel-dir",
        work / "dist",
        ROOT,
        cwd=work,
    )
    (wheel,) = (work / "dist").glob("jobrail-*.whl")
    venv = work / "venv"
    _run(sys.executable, "-m", "venv", "--without-pip", venv, cwd=work)
    python = venv / "bin" / "python"
    site = Path(
        _run(
            python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])", cwd=work
        ).strip()
    )
    (site / "test-environment.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    _run(
        sys.executable,
        "-m",
        "pip",
        "--python",
        python,
        "install",
        "--no-deps",
        "--no-index",
        wheel,
        cwd=work,
    )
    return venv / "bin"


def _env(database_url: str) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("JOBRAIL_")}
    env.pop("PYTHONPATH", None)  # the installed package, not this checkout
    # The wheel still carries the reference contexts, whose chain is not in it.
    env["JOBRAIL_MODULES"] = "jobrail.demo,jobrail.maintenance"
    env["JOBRAIL_DATABASE__URL"] = database_url
    return env


@pytest.fixture
def database_url() -> Iterator[str]:
    require("postgres")
    url = f"{PG_SERVER}/jobrail_wheel_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    yield url
    asyncio.run(drop_database(url))


def test_jobrail_migrate_from_the_installed_wheel(
    installed: Path, database_url: str, tmp_path: Path
) -> None:
    asyncio.run(create_database_if_missing(database_url))
    where = _run(
        installed / "python",
        "-c",
        "import jobrail.persistence.schema as s; print(s.PLATFORM.location)",
        cwd=tmp_path,
        env=_env(database_url),
    ).strip()
    assert Path(where).is_relative_to(installed.parent), where
    assert ROOT not in Path(where).parents

    _run(installed / "jobrail", "migrate", cwd=tmp_path, env=_env(database_url))

    assert tables(database_url) == {*PLATFORM_TABLES, "jobrail_alembic_version"}


def test_jobrail_migrate_from_the_installed_wheel_fails_in_one_line(
    installed: Path, tmp_path: Path
) -> None:
    require("postgres")
    url = f"{PG_SERVER}/jobrail_missing_{uuid.uuid4().hex[:8]}"
    done = subprocess.run(
        [str(installed / "jobrail"), "migrate"],
        cwd=tmp_path,
        env=_env(url),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )

    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        f'jobrail: cannot migrate the database: database "{url.rsplit("/", 1)[1]}" does not '
        "exist (`jobrail migrate --create-database` creates it)"
    ]


def test_the_built_wheel_carries_the_platform_chain(installed: Path) -> None:
    (wheel,) = (installed.parents[1] / "dist").glob("jobrail-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())

    assert "jobrail/persistence/migrations/env.py" in names
    chain = ROOT / "src" / "jobrail" / "persistence" / "migrations" / "versions"
    for revision in chain.glob("*.py"):
        assert f"jobrail/persistence/migrations/versions/{revision.name}" in names
    assert not any(name.startswith("migrations/") for name in names)


def test_the_built_wheel_is_typed_licensed_and_has_one_version(installed: Path) -> None:
    (wheel,) = (installed.parents[1] / "dist").glob("jobrail-*.whl")
    archive = zipfile.ZipFile(wheel)
    names = set(archive.namelist())
    (metadata,) = (name for name in names if name.endswith(".dist-info/METADATA"))
    fields = archive.read(metadata).decode()

    assert "jobrail/py.typed" in names
    assert any(name.endswith(".dist-info/licenses/LICENSE") for name in names)
    assert f"Version: {jobrail.__version__}\n" in fields  # one version, the package's
    assert "License-Expression: MIT\n" in fields
