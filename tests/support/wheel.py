"""The built wheel, installed into a fresh virtualenv outside the repository (once per
test session).

The virtualenv gets the wheel alone (no dependencies, no index); it reaches the test
environment's installed dependencies through a .pth file, so nothing is downloaded. A path
in a .pth file does not run that directory's own .pth files, so the repository's editable
install of jobrail stays out of it."""

import importlib.util
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from tests.support.processes import ROOT


def run(*argv: str | Path, cwd: Path, env: dict[str, str] | None = None) -> str:
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


def outside_env() -> dict[str, str]:
    """This environment without jobrail's settings and without this checkout on the path:
    a process of the virtualenv imports the installed package."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("JOBRAIL_")}
    env.pop("PYTHONPATH", None)
    return env


@pytest.fixture(scope="session")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bin/ directory of a fresh virtualenv with the built wheel installed; the wheel
    is in the virtualenv's parent's dist/."""
    work = tmp_path_factory.mktemp("wheel")
    # With hatchling in the test environment (the dev extra) pip builds with it; without
    # it pip installs the build backend into an isolated build environment.
    isolation = ["--no-build-isolation"] if importlib.util.find_spec("hatchling") else []
    run(
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
    run(sys.executable, "-m", "venv", "--without-pip", venv, cwd=work)
    python = venv / "bin" / "python"
    site = Path(
        run(
            python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])", cwd=work
        ).strip()
    )
    (site / "test-environment.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    run(
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
