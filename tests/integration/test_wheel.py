"""The built wheel migrates a database on its own: installed into a fresh virtualenv outside
the repository (tests.support.wheel's `installed`), `jobrail migrate` finds the platform's
chain inside the package."""

import asyncio
import json
import os
import shutil
import subprocess
import uuid
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

import jobrail
from jobrail.store.admin import create_database_if_missing, drop_database
from tests.support.schema import PLATFORM_TABLES, tables
from tests.support.services import PG_SERVER, require
from tests.support.wheel import outside_env, run

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _env(database_url: str) -> dict[str, str]:
    env = outside_env()  # the installed package, not this checkout
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
    where = run(
        installed / "python",
        "-c",
        "import jobrail.store.schema as s; print(s.PLATFORM.location)",
        cwd=tmp_path,
        env=_env(database_url),
    ).strip()
    assert Path(where).is_relative_to(installed.parent), where
    assert ROOT not in Path(where).parents

    run(installed / "jobrail", "migrate", cwd=tmp_path, env=_env(database_url))

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

    assert "jobrail/store/migrations/env.py" in names
    chain = ROOT / "src" / "jobrail" / "persistence" / "migrations" / "versions"
    for revision in chain.glob("*.py"):
        assert f"jobrail/store/migrations/versions/{revision.name}" in names
    assert not any(name.startswith("migrations/") for name in names)


def test_the_built_wheel_carries_the_consoles_templates_and_static_files(installed: Path) -> None:
    (wheel,) = (installed.parents[1] / "dist").glob("jobrail-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    ops = ROOT / "src" / "jobrail" / "ops"

    for directory in ("templates", "static"):
        shipped = {f"jobrail/ops/{directory}/{f.name}" for f in (ops / directory).iterdir()}
        assert shipped
        assert shipped <= names
    assert "jobrail/ops/static/htmx.min.js" in names


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


def test_the_built_wheel_holds_jobrail_only_and_names_its_demo_module(installed: Path) -> None:
    (wheel,) = (installed.parents[1] / "dist").glob("jobrail-*.whl")
    archive = zipfile.ZipFile(wheel)
    names = set(archive.namelist())
    (entry_points,) = (name for name in names if name.endswith(".dist-info/entry_points.txt"))

    assert {name.split("/", 1)[0] for name in names if ".dist-info/" not in name} == {"jobrail"}
    assert "[jobrail.modules]\ndemo = jobrail.demo:module\n" in archive.read(entry_points).decode()


def test_the_installed_wheel_loads_its_demo_module_by_entry_point(
    installed: Path, tmp_path: Path
) -> None:
    loaded = run(
        installed / "python",
        "-c",
        "from jobrail.runtime.modules import load_modules; "
        "print(' '.join(m.name for m in load_modules(['demo'])))",
        cwd=tmp_path,
        env=outside_env(),
    )

    assert loaded.split() == [
        "maintenance",
        "dispatch",
        "webhooks",
        "workers_seen",
        "demo",
    ]  # the platform's four, then the one named


def test_the_reference_application_runs_beside_the_installed_wheel_as_in_the_image(
    installed: Path, database_url: str, tmp_path: Path
) -> None:
    """The image's layout (infra/Dockerfile): the wheel installed, contexts/, workers/ and
    migrations/ copied into the working directory, JOBRAIL_APP naming the application."""
    app = tmp_path / "app"
    for directory in ("contexts", "workers", "migrations"):
        shutil.copytree(
            ROOT / directory, app / directory, ignore=shutil.ignore_patterns("__pycache__")
        )
    env = {**_env(database_url), "JOBRAIL_APP": "workers.app:rail", "JOBRAIL_MODE": "stack"}
    asyncio.run(create_database_if_missing(database_url))

    run(installed / "jobrail", "migrate", cwd=app, env=env)
    listed = run(installed / "jobrail", "tenants", "list", cwd=app, env=env)

    assert tables(database_url) == {
        *PLATFORM_TABLES,
        "jobrail_alembic_version",
        "billing_invoices",
        "billing_invoice_lines",
        "billing_month_end_runs",
        "notifications",
        "sync_accounts",
        "sync_items",
        "contexts_alembic_version",
    }
    assert json.loads(listed) == {"tenants": []}
