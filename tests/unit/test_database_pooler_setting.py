"""JOBRAIL_DATABASE__POOLER: what the engine and the hot paths' pool are given for it."""

import pytest

from jobrail.settings import DatabaseSettings, SettingsError, load_settings
from jobrail.store.engine import pooled_connect_args

PG_URL = "postgresql+asyncpg://jobrail@pgbouncer:6432/jobrail"


def test_no_pooler_by_default() -> None:
    settings = DatabaseSettings(url=PG_URL)  # type: ignore[arg-type]

    assert settings.pooler == "none"
    assert not settings.transaction_pooled
    assert pooled_connect_args(settings) == {}


@pytest.mark.parametrize("pooler", ["none", "session"])
def test_a_pooler_that_keeps_sessions_keeps_the_statement_caches(
    monkeypatch: pytest.MonkeyPatch, pooler: str
) -> None:
    monkeypatch.setenv("JOBRAIL_DATABASE__URL", PG_URL)
    monkeypatch.setenv("JOBRAIL_DATABASE__POOLER", pooler)

    assert pooled_connect_args(load_settings().database) == {}


def test_transaction_pooling_turns_the_caches_off_and_names_no_statement(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("JOBRAIL_DATABASE__URL", PG_URL)
    monkeypatch.setenv("JOBRAIL_DATABASE__POOLER", "transaction")

    args = pooled_connect_args(load_settings().database)

    assert args["statement_cache_size"] == 0
    assert args["prepared_statement_cache_size"] == 0
    assert args["prepared_statement_name_func"]() == ""  # the unnamed statement


def test_an_unknown_pooler_mode_is_refused_with_the_choices(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("JOBRAIL_DATABASE__URL", PG_URL)
    monkeypatch.setenv("JOBRAIL_DATABASE__POOLER", "statement")

    with pytest.raises(SettingsError) as caught:
        load_settings()

    assert "JOBRAIL_DATABASE__POOLER" in str(caught.value)
    assert "'none', 'session' or 'transaction'" in str(caught.value)


def test_a_pooler_on_sqlite_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JOBRAIL_DATABASE__URL", "sqlite+aiosqlite:///./var/jobrail.db")
    monkeypatch.setenv("JOBRAIL_DATABASE__POOLER", "transaction")

    with pytest.raises(SettingsError) as caught:
        load_settings()

    assert "JOBRAIL_DATABASE__POOLER: Value error, SQLite has no pooler" in str(caught.value)


def test_a_platform_schema_is_refused_with_transaction_pooling(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("JOBRAIL_DATABASE__URL", PG_URL)
    monkeypatch.setenv("JOBRAIL_DATABASE__POOLER", "transaction")
    monkeypatch.setenv("JOBRAIL_DATABASE__SCHEMA", "jobrail")

    with pytest.raises(SettingsError) as caught:
        load_settings()

    message = str(caught.value)
    assert "JOBRAIL_DATABASE__SCHEMA: Value error, a platform schema needs" in message
    assert "session mode (JOBRAIL_DATABASE__POOLER=session)" in message


def test_a_platform_schema_is_kept_with_session_pooling(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JOBRAIL_DATABASE__URL", PG_URL)
    monkeypatch.setenv("JOBRAIL_DATABASE__POOLER", "session")
    monkeypatch.setenv("JOBRAIL_DATABASE__SCHEMA", "jobrail")

    assert load_settings().database.schema_ == "jobrail"
