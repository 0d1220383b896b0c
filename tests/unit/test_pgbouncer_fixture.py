"""The PgBouncer fixture without its binary: skipped outside CI, failed with CI=true."""

from pathlib import Path

import pytest

from tests.support import pgbouncer


@pytest.fixture(autouse=True)
def _no_binary(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(pgbouncer, "BINARY", tmp_path / "pgbouncer")


def test_a_missing_binary_skips_outside_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CI", raising=False)

    with pytest.raises(pytest.skip.Exception, match="make install-pgbouncer"):
        pgbouncer.start()


def test_a_missing_binary_fails_in_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "true")

    with pytest.raises(pytest.fail.Exception, match="may not skip"):
        pgbouncer.start()
