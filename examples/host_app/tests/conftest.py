"""The tests' settings, set before ``host_app.main`` reads them: a SQLite file of the test
session's own (the embedded mode, whose jobs run in the app's process)."""

import os
import shutil
import tempfile

import pytest

DATABASE = "JOBRAIL_DATABASE__URL"
_made = pytest.StashKey[str]()


def pytest_configure(config: pytest.Config) -> None:
    if DATABASE not in os.environ:
        config.stash[_made] = tempfile.mkdtemp(prefix="reports-tests-")
        os.environ[DATABASE] = f"sqlite+aiosqlite:///{config.stash[_made]}/reports.db"


def pytest_unconfigure(config: pytest.Config) -> None:
    if _made in config.stash:
        shutil.rmtree(config.stash[_made], ignore_errors=True)
