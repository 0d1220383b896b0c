"""The request guard on its own, as any ASGI server would call it."""

import json
from typing import Any

from jobrail.http.guard import RequestGuard


async def _app(scope: Any, receive: Any, send: Any) -> None:
    raise AssertionError("the app must not be reached")


async def test_a_content_length_of_thousands_of_digits_is_a_413_not_an_error() -> None:
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "method": "POST",
        "path": "/demo/echo",
        "query_string": b"",
        "headers": [(b"content-length", b"9" * 5000)],
    }
    await RequestGuard(_app, max_body_bytes=65536)(scope, receive, send)

    start, body = sent
    assert start["status"] == 413
    assert (b"connection", b"close") in start["headers"]
    assert json.loads(body["body"])["error"]["code"] == "payload_too_large"
