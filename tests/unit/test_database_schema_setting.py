"""JOBRAIL_DATABASE__SCHEMA: a plain Postgres schema name, refused on SQLite."""

import pytest

from jobrail.settings import DatabaseSettings, SettingsError, load_settings

PG_URL = "postgresql+asyncpg://jobrail@db/jobrail"


def test_no_schema_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JOBRAIL_DATABASE__URL", PG_URL)

    assert load_settings().database.schema_ is None
    assert DatabaseSettings().schema_ is None


@pytest.mark.parametrize("schema", ["jobrail", "_jr", "jr_2", "a" * 63, "select"])
def test_a_plain_schema_name_is_taken_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, schema: str
) -> None:
    monkeypatch.setenv("JOBRAIL_DATABASE__URL", PG_URL)
    monkeypatch.setenv("JOBRAIL_DATABASE__SCHEMA", schema)

    assert load_settings().database.schema_ == schema


def test_the_schema_can_be_given_by_its_name_in_code() -> None:
    by_name = DatabaseSettings.model_validate({"url": PG_URL, "schema": "jr"})

    assert by_name.schema_ == "jr"
    assert by_name.model_copy(update={"schema_": None}).schema_ is None


@pytest.mark.parametrize(
    "schema", ["", "Jobrail", "2jobs", "job-rail", "job rail", 'jr"; drop', "a" * 64, "pg_jobs"]
)
def test_a_schema_name_that_is_not_plain_is_refused(
    monkeypatch: pytest.MonkeyPatch, schema: str
) -> None:
    monkeypatch.setenv("JOBRAIL_DATABASE__URL", PG_URL)
    monkeypatch.setenv("JOBRAIL_DATABASE__SCHEMA", schema)

    with pytest.raises(SettingsError, match="JOBRAIL_DATABASE__SCHEMA: Value error, "):
        load_settings()


def test_a_schema_on_sqlite_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JOBRAIL_DATABASE__URL", "sqlite+aiosqlite:///./var/jobrail.db")
    monkeypatch.setenv("JOBRAIL_DATABASE__SCHEMA", "jobrail")

    with pytest.raises(SettingsError) as caught:
        load_settings()

    assert "JOBRAIL_DATABASE__SCHEMA: Value error, SQLite has no schemas" in str(caught.value)
