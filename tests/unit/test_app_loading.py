"""`--app pkg.module:rail` finds the host's package in the directory it is run from, as
uvicorn finds its app, with nothing on PYTHONPATH."""

import sys
import uuid
from pathlib import Path

import pytest

from jobrail import JobRail
from jobrail.facade.loading import load_rail


def test_the_host_package_is_found_in_the_current_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    package = f"host_{uuid.uuid4().hex[:8]}"
    (tmp_path / package).mkdir()
    (tmp_path / package / "__init__.py").write_text("")
    (tmp_path / package / "main.py").write_text("from jobrail import JobRail\nrail = JobRail()\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    try:
        rail = load_rail(f"{package}.main:rail")
    finally:
        for name in [name for name in sys.modules if name.split(".")[0] == package]:
            del sys.modules[name]

    assert isinstance(rail, JobRail)
    assert sys.path[0] == str(tmp_path)
