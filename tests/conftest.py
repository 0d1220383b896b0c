import os

import pytest

pytest_plugins = [
    "tests.support.pgbouncer",  # before fixtures, which imports it
    "tests.support.fixtures",
    "tests.support.redis_cluster",
    "tests.support.wheel",
]

# Tests never read a developer's .env or inherit JOBRAIL_* settings from the shell.
for _name in [name for name in os.environ if name.startswith("JOBRAIL_")]:
    del os.environ[_name]


@pytest.fixture(autouse=True)
def _no_dotenv(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> None:
    monkeypatch.chdir(tmp_path_factory.mktemp("cwd"))
