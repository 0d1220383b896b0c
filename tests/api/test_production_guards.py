"""What production refuses, and the sandbox vendor served only where it may be, bounded.

The stack-mode halves (the sandbox absent, /metrics with its token, the demo tenant not
seeded into Postgres) are in tests/integration/test_production_guards.py.
"""

import subprocess
from pathlib import Path

import httpx
import pytest

from contexts.sync.adapters.sandbox import MAX_ACCOUNT_ID, SandboxState, create_sandbox_app
from jobrail.runtime.app import create_app
from jobrail.settings import Settings, SettingsError, load_settings
from tests.api.conftest import embedded_settings, migrated
from tests.support.apps import REFERENCE
from tests.support.processes import BIN, ROOT

DEMO = {"Authorization": "Bearer demo-key"}


def _jobrail(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """The `jobrail` command as an operator runs it: its exit code and what it printed."""
    import os

    clean = {k: v for k, v in os.environ.items() if not k.startswith("JOBRAIL_")}
    return subprocess.run(
        [str(BIN / "jobrail"), *args],
        cwd=ROOT,
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


# -- production refuses the embedded mode ---------------------------------------------


def test_production_refuses_the_embedded_mode_naming_the_fix(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("JOBRAIL_ENVIRONMENT", "production")

    with pytest.raises(SettingsError) as refused:
        load_settings()

    assert "JOBRAIL_ENVIRONMENT" in str(refused.value)
    assert "production does not run the embedded mode" in str(refused.value)
    assert "JOBRAIL_MODE=stack" in str(refused.value)
    monkeypatch.setenv("JOBRAIL_MODE", "stack")
    assert load_settings().environment == "production"  # the stack mode is fine


def test_production_refuses_webhooks_to_private_addresses(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Any tenant chooses its webhook URLs: on private addresses, it could make the
    # platform call into the network it runs in.
    monkeypatch.setenv("JOBRAIL_ENVIRONMENT", "production")
    monkeypatch.setenv("JOBRAIL_MODE", "stack")
    monkeypatch.setenv("JOBRAIL_EVENTS__WEBHOOK_PRIVATE_ADDRESSES", "true")

    with pytest.raises(SettingsError) as refused:
        load_settings()

    assert "JOBRAIL_EVENTS__WEBHOOK_PRIVATE_ADDRESSES is for development and tests" in str(
        refused.value
    )
    monkeypatch.setenv("JOBRAIL_ENVIRONMENT", "development")
    assert load_settings().events.webhook_private_addresses is True


@pytest.mark.parametrize("command", ["api", "run", "tenants"])
def test_jobrail_in_production_without_the_stack_mode_exits_with_a_message(
    tmp_path: Path, command: str
) -> None:
    args = [command, "list"] if command == "tenants" else [command]
    database = tmp_path / "never.db"

    done = _jobrail(
        {
            "JOBRAIL_ENVIRONMENT": "production",
            "JOBRAIL_DATABASE__URL": f"sqlite+aiosqlite:///{database}",
        },
        *args,
    )

    assert done.returncode == 2, done.stderr
    assert "production does not run the embedded mode" in done.stderr
    assert "JOBRAIL_MODE=stack" in done.stderr
    assert "Traceback" not in done.stderr
    assert not database.exists()  # nothing was migrated or seeded


# -- /metrics in production ---------------------------------------------------------


def _production(**overrides: object) -> Settings:
    values: dict[str, object] = {
        "mode": "stack",
        "environment": "production",
        "database": {"url": "postgresql+asyncpg://nobody@127.0.0.1:1/none"},
    }
    values.update(overrides)
    return Settings(**values)  # type: ignore[arg-type]


def test_a_serving_process_in_production_needs_a_metrics_token() -> None:
    with pytest.raises(SettingsError, match="JOBRAIL_METRICS__TOKEN") as api:
        _production().check_can_serve(worker=False)
    assert "JOBRAIL_METRICS__API_ENABLED=false" in str(api.value)
    with pytest.raises(SettingsError, match="JOBRAIL_METRICS__WORKER_PORT=0"):
        _production(metrics={"worker_port": 9100}).check_can_serve(worker=True)

    # A token, or metrics turned off, and it may serve; other commands never ask.
    _production(metrics={"token": "scrape"}).check_can_serve(worker=False)
    _production(metrics={"api_enabled": False}).check_can_serve(worker=False)
    _production().check_can_serve(worker=True)  # worker_port 0: it serves no metrics
    _production(environment="test").check_can_serve(worker=False)


@pytest.mark.parametrize(
    ("command", "extra"),
    [("api", {}), ("worker", {"JOBRAIL_METRICS__WORKER_PORT": "9100"})],
)
def test_jobrail_api_and_worker_in_production_without_a_metrics_token_exit_with_a_message(
    command: str, extra: dict[str, str]
) -> None:
    done = _jobrail(
        {
            "JOBRAIL_MODE": "stack",
            "JOBRAIL_ENVIRONMENT": "production",
            # Nothing listens there: the refusal must come before any connection.
            "JOBRAIL_DATABASE__URL": "postgresql+asyncpg://nobody@127.0.0.1:1/none",
            "JOBRAIL_RABBIT__URL": "amqp://nobody:nothing@127.0.0.1:1/",
            **extra,
        },
        command,
    )

    assert done.returncode == 2, done.stderr
    assert "JOBRAIL_METRICS__TOKEN" in done.stderr
    assert "Traceback" not in done.stderr


async def test_an_app_built_in_production_without_a_token_refuses_every_scrape() -> None:
    # An app made some other way than `jobrail api` (uvicorn --factory) still refuses.
    app = create_app(_production(), modules=REFERENCE)
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://api"
    ) as client:
        refused = await client.get("/metrics")
        with_anything = await client.get("/metrics", headers={"Authorization": "Bearer x"})

    assert refused.status_code == with_anything.status_code == 403
    assert refused.json()["error"]["code"] == "forbidden"
    assert "JOBRAIL_METRICS__TOKEN" in refused.json()["error"]["message"]


# -- the sandbox vendor -----------------------------------------------------------------


async def _sandbox_served(settings: Settings) -> bool:
    """Whether an app built from `settings` answers at /sandbox/vendor (its routes are
    not listed by a plain attribute, so ask it as a client would)."""
    app = create_app(settings, modules=REFERENCE)
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://api"
    ) as client:
        calls = await client.get("/sandbox/vendor/_calls")
        forget = await client.delete("/sandbox/vendor/_calls")
    assert calls.status_code in {200, 404}
    assert calls.status_code == forget.status_code
    return calls.status_code == 200


async def test_the_sandbox_is_served_in_the_embedded_mode_only_unless_switched_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stack = {"mode": "stack", "database": {"url": "postgresql+asyncpg://x@127.0.0.1:1/x"}}

    assert await _sandbox_served(embedded_settings(tmp_path))  # the embedded mode serves it
    assert not await _sandbox_served(embedded_settings(tmp_path, **stack))
    assert not await _sandbox_served(_production(metrics={"token": "t"}))

    monkeypatch.setenv("JOBRAIL_SYNC__SANDBOX", "false")
    assert not await _sandbox_served(embedded_settings(tmp_path))

    # The development switch serves it in the stack mode...
    monkeypatch.setenv("JOBRAIL_SYNC__SANDBOX", "true")
    assert await _sandbox_served(embedded_settings(tmp_path, **stack))
    # ...and production refuses the switch rather than ignore it.
    with pytest.raises(SettingsError, match="JOBRAIL_SYNC__SANDBOX"):
        create_app(_production(metrics={"token": "t"}), modules=REFERENCE)


def test_jobrail_api_in_production_with_the_sandbox_switched_on_exits_with_a_message() -> None:
    done = _jobrail(
        {
            "JOBRAIL_APP": "workers.app:rail",  # the sync context refuses the setting
            "JOBRAIL_MODE": "stack",
            "JOBRAIL_ENVIRONMENT": "production",
            "JOBRAIL_METRICS__TOKEN": "scrape",
            "JOBRAIL_SYNC__SANDBOX": "true",
            "JOBRAIL_DATABASE__URL": "postgresql+asyncpg://nobody@127.0.0.1:1/none",
            "JOBRAIL_RABBIT__URL": "amqp://nobody:nothing@127.0.0.1:1/",
        },
        "api",
    )

    assert done.returncode == 2, done.stderr
    assert "JOBRAIL_SYNC__SANDBOX: production never serves the sandbox" in done.stderr
    assert "Traceback" not in done.stderr


async def test_the_sandbox_remembers_a_bounded_number_of_calls_and_accounts() -> None:
    state = SandboxState(rate_per_s=10_000, max_calls=50, max_accounts=20)
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=create_sandbox_app(state)), base_url="http://sandbox"
    ) as client:
        for n in range(300):
            account = f"acct-{n}-" + "x" * (MAX_ACCOUNT_ID - 20)
            assert (await client.get(f"/accounts/{account}/items")).status_code == 200
            if n % 3 == 0:
                flaky = f"flaky-{n}"
                assert (await client.get(f"/accounts/{flaky}/items")).status_code == 503
        too_long = await client.get(f"/accounts/{'y' * (MAX_ACCOUNT_ID + 1)}/items")
        odd_cursor = await client.get("/accounts/a-1/items", params={"cursor": "z" * 5000})
        listed = (await client.get("/_calls")).json()

    assert len(state.calls) == len(listed["calls"]) == 50
    assert listed["calls"][-1]["account_id"].startswith("acct-299-")  # the newest are kept
    assert len(state.max_in_flight) == len(listed["max_in_flight"]) == 20
    assert len(state.flaky) <= 20
    assert state.in_flight == {}  # nothing under way: nothing kept
    assert too_long.status_code == odd_cursor.status_code == 400
    assert state.refused == 2
    assert not any(len(call["account_id"]) > MAX_ACCOUNT_ID for call in state.calls)


async def test_the_sandbox_checks_its_rate_before_it_records_a_call_and_still_records_429s() -> (
    None
):
    state = SandboxState(rate_per_s=2, max_calls=10)
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=create_sandbox_app(state)), base_url="http://sandbox"
    ) as client:
        statuses = [(await client.get("/accounts/a-1/items")).status_code for _ in range(30)]

    assert statuses[:2] == [200, 200]
    assert 429 in statuses
    assert len(state.calls) == 10
    assert {call["status"] for call in state.calls} <= {200, 429}


async def test_the_embedded_modes_sandbox_is_bounded_by_its_settings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("JOBRAIL_SYNC__SANDBOX_MAX_CALLS", "5")
    monkeypatch.setenv("JOBRAIL_SYNC__SANDBOX_RATE_PER_S", "1000")
    app = create_app(await migrated(embedded_settings(tmp_path)), modules=REFERENCE)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://api") as api,
    ):
        for n in range(12):
            assert (await api.get(f"/sandbox/vendor/accounts/a-{n}/items")).status_code == 200
        calls = (await api.get("/sandbox/vendor/_calls")).json()["calls"]

    assert [call["account_id"] for call in calls] == [f"a-{n}" for n in range(7, 12)]
