"""The host app of examples/host_app, run as a team would run it: jobrail from the built
wheel in a fresh virtualenv, the app copied outside the repository.

In the stack mode (a database of its own, the real RabbitMQ and Redis): `jobrail migrate`
and the host's own Alembic chain beside it (`alembic check` finds nothing to change: the
host's env.py leaves jobrail's tables out), the app under uvicorn, `jobrail worker --app
host_app.main:rail`; a report rendered through the host's route (its own token, its own
row and the job in one transaction) runs in the worker, and its status is read back
through rail.router(). In the embedded mode (SQLite, no services) the same requests. In
both, jobrail's API mounted at /jobrail serves no demo: the host never asked for it.
And the host's own test suite, which migrates from the test process (no subprocess)."""

import asyncio
import shutil
import time
import uuid
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from jobrail.settings import RabbitSettings
from jobrail.store.admin import create_database_if_missing, drop_database
from jobrail.transport.topology import Topology
from tests.support.processes import ROOT, Process
from tests.support.rabbit import RabbitProbe
from tests.support.servers import free_port
from tests.support.services import AMQP_URL, PG_SERVER, REDIS_URL, require
from tests.support.wheel import outside_env, run

pytestmark = [pytest.mark.integration, pytest.mark.slow]

EXAMPLE = ROOT / "examples" / "host_app"
TOKEN = {"X-Team-Token": "acme-token"}


@pytest.fixture
def host_dir(tmp_path: Path) -> Path:
    """A directory outside the repository holding a copy of host_app/."""
    shutil.copytree(EXAMPLE, tmp_path / "host_app", ignore=shutil.ignore_patterns("__pycache__"))
    return tmp_path


@pytest.fixture
def host_env() -> dict[str, str]:
    """What both modes share: none of jobrail's settings (JOBRAIL_MODULES unset too: a
    host's JobRail loads no demo unless it names it)."""
    return outside_env()


@pytest.fixture
def processes() -> Iterator[list[Process]]:
    started: list[Process] = []
    yield started
    for process in reversed(started):
        process.stop()


def _migrate(installed: Path, host_dir: Path, env: dict[str, str]) -> None:
    where = run(installed / "python", "-c", "import jobrail; print(jobrail.__file__)",
                cwd=host_dir, env=env)  # fmt: skip
    assert Path(where.strip()).is_relative_to(installed.parent), where  # the wheel's jobrail
    run(installed / "jobrail", "migrate", "--app", "host_app.main:rail", cwd=host_dir, env=env)
    alembic = (installed / "python", "-m", "alembic", "-c", "host_app/alembic.ini")
    run(*alembic, "upgrade", "head", cwd=host_dir, env=env)
    # The host's autogenerate sees jobrail's tables beside its own, and leaves them alone.
    checked = run(*alembic, "check", cwd=host_dir, env=env)
    assert "No new upgrade operations detected" in checked, checked


def _serve(installed: Path, host_dir: Path, env: dict[str, str], processes: list[Process]) -> str:
    port = free_port()
    app = Process(
        [
            str(installed / "python"),
            "-m",
            "uvicorn",
            "host_app.main:app",
            "--port",
            str(port),
            "--no-access-log",
        ],
        env,
        "host-app",
        cwd=host_dir,
        unset=("PYTHONPATH",),
    )
    processes.append(app)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        assert app.alive(), app.output()[-3000:]
        try:
            httpx.get(f"{url}/docs", timeout=1)
            return url
        except httpx.TransportError:
            time.sleep(0.1)
    raise AssertionError(f"the host app did not start:\n{app.output()[-3000:]}")


def _render_and_wait(url: str, report_id: str, processes: list[Process]) -> dict[str, Any]:
    with httpx.Client(base_url=url, timeout=10) as client:
        refused = client.post(f"/reports/{report_id}/render", headers={"X-Team-Token": "nope"})
        assert refused.status_code == 401, refused.text

        accepted = client.post(f"/reports/{report_id}/render", headers=TOKEN)
        assert accepted.status_code == 202, accepted.text
        job_id = accepted.json()["job_id"]

        deadline = time.monotonic() + 30
        while True:
            job = client.get(f"/jobs/{job_id}", headers=TOKEN)
            assert job.status_code == 200, job.text
            if job.json()["status"] in {"succeeded", "failed", "dead"}:
                break
            if time.monotonic() > deadline:
                logs = "\n".join(p.output()[-3000:] for p in processes)
                raise AssertionError(f"job {job_id} is still {job.json()['status']}:\n{logs}")
            time.sleep(0.1)

        other_team = client.get(f"/jobs/{job_id}", headers={"X-Team-Token": "globex-token"})
        row = client.get(f"/reports/{report_id}", headers=TOKEN)
        demo_key = {"Authorization": "Bearer demo-key"}
        overview = client.get("/jobrail/admin/overview", headers=demo_key)
        echo = client.post("/jobrail/demo/echo", json={"message": "hi"}, headers=demo_key)
    assert other_team.status_code == 404, other_team.text
    assert overview.status_code == 401, overview.text  # no demo tenant in the host's database
    assert echo.status_code == 404, echo.text  # nor the demo's routes
    assert row.status_code == 200, row.text
    assert row.json() == {"report_id": report_id, "status": "rendering", "job_id": job_id}
    result: dict[str, Any] = job.json()
    return result


@pytest.fixture
def stack_env(host_env: dict[str, str], processes: list[Process]) -> Iterator[dict[str, str]]:
    """A database of its own and queue and key names of its own; the processes stop
    before the database and the queues go."""
    require("postgres")
    require("rabbitmq")
    database = f"{PG_SERVER}/jobrail_example_{uuid.uuid4().hex[:8]}"
    prefix = f"t{uuid.uuid4().hex[:8]}."
    asyncio.run(create_database_if_missing(database))
    try:
        yield {
            **host_env,
            "JOBRAIL_MODE": "stack",
            "JOBRAIL_DATABASE__URL": database,
            "JOBRAIL_RABBIT__URL": AMQP_URL,
            "JOBRAIL_RABBIT__PREFIX": prefix,
            "JOBRAIL_REDIS__URL": REDIS_URL,
            "JOBRAIL_REDIS__KEY_PREFIX": f"{prefix}jobrail:",
            "JOBRAIL_WORKER__PROCESSES": "1",
            "JOBRAIL_WORKER__SHUTDOWN_GRACE_S": "5",
        }
    finally:
        for process in processes:
            process.stop()
        asyncio.run(
            RabbitProbe(Topology.from_settings(RabbitSettings(prefix=prefix))).delete_topology()
        )
        asyncio.run(drop_database(database))


def test_the_example_is_not_in_the_wheel(installed: Path) -> None:
    (wheel,) = (installed.parents[1] / "dist").glob("jobrail-*.whl")
    names = zipfile.ZipFile(wheel).namelist()

    assert not [name for name in names if name.startswith(("examples/", "host_app/"))]


def test_the_host_app_in_the_stack_mode(
    installed: Path, host_dir: Path, stack_env: dict[str, str], processes: list[Process]
) -> None:
    env = stack_env
    _migrate(installed, host_dir, env)
    processes.append(
        Process(
            [str(installed / "jobrail"), "worker", "--app", "host_app.main:rail"],
            env,
            "host-worker",
            cwd=host_dir,
            unset=("PYTHONPATH",),
        )
    )
    url = _serve(installed, host_dir, env, processes)

    job = _render_and_wait(url, "q3", processes)

    assert job["status"] == "succeeded", job
    assert job["result"] == {"url": "https://reports.example/acme/q3.pdf"}
    assert job["type"] == "reports.render"


def test_the_host_app_in_the_embedded_mode(
    installed: Path, host_dir: Path, host_env: dict[str, str], processes: list[Process]
) -> None:
    env = {**host_env, "JOBRAIL_MODE": "embedded"}  # SQLite in ./var, an in-memory broker
    _migrate(installed, host_dir, env)
    url = _serve(installed, host_dir, env, processes)

    job = _render_and_wait(url, "q4", processes)

    assert job["status"] == "succeeded", job
    assert job["result"] == {"url": "https://reports.example/acme/q4.pdf"}
    assert (host_dir / "var" / "jobrail.db").is_file()


def test_the_host_apps_own_test_suite_migrates_in_process(
    installed: Path, host_dir: Path, host_env: dict[str, str]
) -> None:
    # host_app/tests: `await rail.migrate()` and the host's chain through Alembic's command
    # API, then a report rendered in-process; on a SQLite file of the suite's own.
    done = run(installed / "python", "-m", "pytest", "host_app/tests", "-p", "no:cacheprovider",
               cwd=host_dir, env=host_env)  # fmt: skip

    assert "1 passed" in done, done
