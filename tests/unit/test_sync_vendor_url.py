"""Where the sync context calls its vendor: the sandbox at the API's own address unless
JOBRAIL_SYNC__VENDOR_BASE_URL says otherwise (it once assumed port 8000 whatever the API
listened on, so an app on another port synced against nothing, or another app's sandbox)."""

import pytest

from contexts.sync.adapters.settings import SyncSettings


@pytest.fixture(autouse=True)
def _no_vendor_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("JOBRAIL_SYNC__VENDOR_BASE_URL", raising=False)


@pytest.mark.parametrize(
    ("host", "port", "url"),
    [
        ("127.0.0.1", 8765, "http://127.0.0.1:8765/sandbox/vendor"),
        ("0.0.0.0", 9000, "http://127.0.0.1:9000/sandbox/vendor"),
        ("::", 8000, "http://[::1]:8000/sandbox/vendor"),
        ("api.internal", 80, "http://api.internal:80/sandbox/vendor"),
    ],
)
def test_unset_the_vendor_is_the_sandbox_at_the_apis_own_address(
    host: str, port: int, url: str
) -> None:
    assert SyncSettings(_env_file=None).vendor_url(host, port) == url  # type: ignore[call-arg]


def test_a_vendor_url_that_is_set_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JOBRAIL_SYNC__VENDOR_BASE_URL", "https://vendor.example/api")
    settings = SyncSettings(_env_file=None)  # type: ignore[call-arg]
    assert settings.vendor_url("127.0.0.1", 8765) == "https://vendor.example/api"
