"""A client that goes away while the app reads its body is a normal event: no ERROR
log with a traceback (anonymous clients could produce those at will), and no answer."""

import logging
from typing import Any

import pytest

from tests.support.fixtures import ApiClient


async def _gone_while_sending_the_body(api: ApiClient, method: str, path: str) -> list[Any]:
    sent: list[Any] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [
            (b"host", b"api"),
            (b"content-type", b"application/x-www-form-urlencoded"),
            (b"content-length", b"500"),
            (b"cookie", b"jobrail_ops=" + b"s" * 43),  # a well-formed session token
        ],
        "client": ("127.0.0.1", 50000),
        "server": ("api", 80),
    }
    await api.app(scope, receive, send)
    return sent


@pytest.mark.parametrize("path", ["/ops/login", "/ops/logout"])
async def test_a_client_gone_while_sending_the_sign_in_form_is_no_error(
    api: ApiClient, caplog: pytest.LogCaptureFixture, path: str
) -> None:
    with caplog.at_level(logging.DEBUG):
        sent = await _gone_while_sending_the_body(api, "POST", path)

    errors = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert errors == [], [r.getMessage() for r in errors]
    assert sent == []  # nobody to answer
