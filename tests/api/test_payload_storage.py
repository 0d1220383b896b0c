"""Payloads and results are stored as UTF-8 JSON, and a result has a size bound."""

import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from jobrail.runtime.app import create_app
from tests.api.conftest import embedded_settings, migrated
from tests.support.apps import REFERENCE
from tests.support.fixtures import ApiClient


@pytest.fixture
async def small_results(tmp_path: Path) -> AsyncIterator[ApiClient]:
    settings = await migrated(embedded_settings(tmp_path, jobs={"max_result_bytes": 2000}))
    app = create_app(settings, modules=REFERENCE)
    client = ApiClient(transport=httpx.ASGITransport(app=app), base_url="http://api")
    client.app = app
    async with app.router.lifespan_context(app), client:
        yield client.sign_in_with("demo", "demo-key")


def _stored_sizes(tmp_path: Path) -> tuple[int, int]:
    with sqlite3.connect(tmp_path / "jobrail.db") as db:
        payload, result = db.execute(
            "SELECT length(CAST(payload AS BLOB)), length(CAST(result AS BLOB)) FROM jobs"
        ).fetchone()
    return int(payload), int(result)


async def test_emoji_are_stored_as_utf8_not_as_ascii_escapes(
    api: ApiClient, tmp_path: Path
) -> None:
    message = "😀" * 2000
    job = await api.wait_status(await api.echo(message=message), "succeeded", timeout=15)

    assert job["result"] == {"echo": message}
    payload, result = _stored_sizes(tmp_path)
    # 4 bytes of UTF-8 per emoji; as \ud83d\ude00 escapes it would be 12.
    assert payload < 4 * 2000 + 100
    assert result < 4 * 2000 + 100


async def test_a_result_over_the_bound_fails_the_job_saying_why(
    small_results: ApiClient, tmp_path: Path
) -> None:
    job_id = await small_results.echo(message="é" * 1500)

    job = await small_results.wait_status(job_id, "failed", "succeeded", timeout=15)

    assert job["status"] == "failed"
    assert job["attempts"] == 1
    assert job["result"] is None
    assert "MAX_RESULT_BYTES" in job["last_error"]
    assert "permanent" in job["last_error"]


async def test_a_result_under_the_bound_is_stored(small_results: ApiClient) -> None:
    job_id = await small_results.echo(message="é" * 900)

    job = await small_results.wait_status(job_id, "failed", "succeeded", timeout=15)

    assert job["status"] == "succeeded", job["last_error"]
