"""`jobrail api`'s HTTP server: a header size limit, header- and body-read timeouts,
and JSON refusals, over real sockets to a real server process (embedded mode, no services)."""

import http.client
import json
import re
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import uvicorn
from fastapi import FastAPI

from jobrail.http.server import uvicorn_options
from tests.support.apps import REFERENCE
from tests.support.processes import BIN, Process, wait_until
from tests.support.servers import free_port

HEADER_TIMEOUT_S = 1.0
BODY_TIMEOUT_S = 2.0
CLOSE_DEADLINE_S = 30.0  # generous: the machine is shared and slow


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, int]]:
    tmp = tmp_path_factory.mktemp("api")
    port = free_port()
    api = Process(
        [str(BIN / "jobrail"), "run"],
        {
            "JOBRAIL_MODE": "embedded",
            "JOBRAIL_ENVIRONMENT": "test",
            "JOBRAIL_DATABASE__URL": f"sqlite+aiosqlite:///{tmp}/jobrail.db",
            "JOBRAIL_API__PORT": str(port),
            "JOBRAIL_API__HEADER_TIMEOUT_S": str(HEADER_TIMEOUT_S),
            "JOBRAIL_API__BODY_TIMEOUT_S": str(BODY_TIMEOUT_S),
        },
        "api",
    )
    try:
        wait_until(lambda: _answers(port), timeout=60, what=f"jobrail run on :{port}")
        yield "127.0.0.1", port
    finally:
        api.stop()


def _answers(port: int) -> bool:
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
        conn.request("GET", "/health")
        return conn.getresponse().status == 200
    except OSError:
        return False


def _read_until_closed(sock: socket.socket, deadline_s: float = CLOSE_DEADLINE_S) -> bytes:
    """Everything the server sends until it closes the connection (or the deadline)."""
    sock.settimeout(deadline_s)
    received = b""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            break
        if not chunk:
            return received
        received += chunk
    raise AssertionError(f"the server kept the connection open; got {received[:200]!r}")


def _parse(response: bytes) -> tuple[int, dict[str, str], dict[str, object]]:
    head, _, body = response.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    return status, headers, json.loads(body)


def test_a_40_mb_header_is_a_431_in_json_and_the_connection_closes(
    server: tuple[str, int],
) -> None:
    sock = socket.create_connection(server, timeout=10)
    errors: list[BaseException] = []

    def send_huge_header() -> None:
        try:
            sock.sendall(b"GET /jobs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ")
            chunk = b"a" * (1024 * 1024)
            for _ in range(40):
                sock.sendall(chunk)
            sock.sendall(b"\r\n\r\n")
        except OSError as exc:  # the server may stop reading once it has answered
            errors.append(exc)

    sender = threading.Thread(target=send_huge_header, daemon=True)
    sender.start()
    try:
        response = _read_until_closed(sock)
    finally:
        sender.join(CLOSE_DEADLINE_S)
        sock.close()

    status, headers, body = _parse(response)
    assert status == 431
    assert headers["content-type"] == "application/json"
    assert headers["connection"] == "close"
    assert headers["x-request-id"]
    assert body["error"]["code"] == "headers_too_large"  # type: ignore[index]


@pytest.mark.parametrize("size", [17 * 1024, 200 * 1024])
def test_headers_over_the_limit_that_arrive_whole_are_a_431_too(
    server: tuple[str, int], size: int
) -> None:
    # Parsed in one read (or a few): refused by what was parsed, not by what is waiting.
    sock = socket.create_connection(server, timeout=10)
    try:
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * size + b"\r\n\r\n")
        response = _read_until_closed(sock)
    finally:
        sock.close()

    status, headers, body = _parse(response)
    assert status == 431
    assert headers["connection"] == "close"
    assert body["error"]["code"] == "headers_too_large"  # type: ignore[index]


def test_headers_under_the_limit_are_served(server: tuple[str, int]) -> None:
    conn = http.client.HTTPConnection(*server, timeout=10)
    try:
        conn.request("GET", "/health", headers={f"X-Note-{i}": "a" * 1000 for i in range(14)})
        response = conn.getresponse()
        response.read()
    finally:
        conn.close()

    assert response.status == 200


def test_pipelined_requests_are_each_answered_in_order(server: tuple[str, int]) -> None:
    sock = socket.create_connection(server, timeout=10)
    try:
        sock.sendall(
            b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
            b"GET /nowhere HTTP/1.1\r\nHost: x\r\n\r\n"
            b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        )
        response = _read_until_closed(sock)
    finally:
        sock.close()

    # Each response's status line follows the previous response's body.
    statuses = [int(status) for status in re.findall(rb"HTTP/1\.1 (\d{3}) ", response)]
    assert statuses == [200, 404, 200]


def test_headers_that_never_end_are_cut_off_after_the_timeout(
    server: tuple[str, int],
) -> None:
    sock = socket.create_connection(server, timeout=10)
    try:
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        started = time.monotonic()
        response = _read_until_closed(sock)
        waited = time.monotonic() - started
    finally:
        sock.close()

    assert waited >= HEADER_TIMEOUT_S * 0.5
    status, headers, body = _parse(response)
    assert status == 408
    assert headers["x-request-id"]
    assert body["error"]["code"] == "request_timeout"  # type: ignore[index]


def test_a_connection_that_sends_nothing_is_closed_after_the_timeout(
    server: tuple[str, int],
) -> None:
    sock = socket.create_connection(server, timeout=10)
    try:
        assert _read_until_closed(sock) == b""
    finally:
        sock.close()


def test_a_slow_request_after_a_first_one_is_cut_off_too(server: tuple[str, int]) -> None:
    sock = socket.create_connection(server, timeout=10)
    try:
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        first = sock.recv(65536)
        assert first.startswith(b"HTTP/1.1 200")
        sock.sendall(b"GET /health HTTP/1.1\r\nHost")
        response = _read_until_closed(sock)
    finally:
        sock.close()

    assert _parse(response)[0] == 408


_ECHO_HEAD = (
    b"POST /demo/echo HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer demo-key\r\n"
    b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n"
)


def _assert_body_timeout(response: bytes) -> None:
    status, headers, body = _parse(response)
    assert status == 408
    assert headers["content-type"] == "application/json"
    assert headers["connection"] == "close"
    assert headers["x-request-id"]
    assert body["error"]["code"] == "request_timeout"  # type: ignore[index]
    assert "body" in body["error"]["message"]  # type: ignore[index]


@pytest.mark.parametrize(
    "head",
    [
        _ECHO_HEAD % 60000,
        # No key needed to hold a connection this way: the sign-in form.
        b"POST /ops/login HTTP/1.1\r\nHost: x\r\nContent-Length: 500\r\n\r\n",
    ],
    ids=["with-a-key", "sign-in-form"],
)
def test_a_body_that_never_arrives_is_cut_off_after_the_body_timeout(
    server: tuple[str, int], head: bytes
) -> None:
    sock = socket.create_connection(server, timeout=10)
    try:
        sock.sendall(head + b"{")
        response = _read_until_closed(sock)
    finally:
        sock.close()

    _assert_body_timeout(response)


def test_a_body_trickled_a_byte_at_a_time_is_cut_off_too(server: tuple[str, int]) -> None:
    sock = socket.create_connection(server, timeout=10)
    done = threading.Event()

    def trickle() -> None:
        try:
            sock.sendall(_ECHO_HEAD % 60000)
            while not done.wait(0.2):  # each byte well inside any per-read timer
                sock.sendall(b" ")
        except OSError:
            pass  # the server has closed the connection

    sender = threading.Thread(target=trickle, daemon=True)
    sender.start()
    try:
        response = _read_until_closed(sock)
    finally:
        done.set()
        sender.join(CLOSE_DEADLINE_S)
        sock.close()

    _assert_body_timeout(response)


def test_a_body_trickled_after_the_app_answered_without_it_is_cut_off(
    server: tuple[str, int],
) -> None:
    # /health answers without reading the body: no second answer, only the close.
    sock = socket.create_connection(server, timeout=10)
    done = threading.Event()

    def trickle() -> None:
        try:
            sock.sendall(b"POST /health HTTP/1.1\r\nHost: x\r\nContent-Length: 60000\r\n\r\n")
            while not done.wait(0.2):
                sock.sendall(b" ")
        except OSError:
            pass

    sender = threading.Thread(target=trickle, daemon=True)
    sender.start()
    try:
        response = _read_until_closed(sock)
    finally:
        done.set()
        sender.join(CLOSE_DEADLINE_S)
        sock.close()

    assert response.startswith(b"HTTP/1.1 "), response[:200]
    assert response.count(b"HTTP/1.1 ") == 1


def test_a_body_sent_in_pieces_within_the_timeout_is_served(server: tuple[str, int]) -> None:
    body = json.dumps({"message": "in pieces"}).encode()
    sock = socket.create_connection(server, timeout=CLOSE_DEADLINE_S)
    try:
        sock.sendall(_ECHO_HEAD % len(body) + body[:5])
        time.sleep(0.2)
        sock.sendall(body[5:])
        response = sock.recv(65536)
    finally:
        sock.close()

    assert response.startswith(b"HTTP/1.1 202"), response[:200]


@pytest.mark.parametrize(
    "request_bytes",
    [
        b"GET /health HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n",
        # A raw NUL in a header or the request line (README: the server's 400, not a 422).
        b"GET /health HTTP/1.1\r\nHost: x\r\nX-Note: a\x00b\r\n\r\n",
        b"GET /heal\x00th HTTP/1.1\r\nHost: x\r\n\r\n",
    ],
    ids=["bad-header", "nul-in-header", "nul-in-request-line"],
)
def test_an_unparseable_request_is_a_json_400_with_a_request_id(
    server: tuple[str, int], request_bytes: bytes
) -> None:
    sock = socket.create_connection(server, timeout=10)
    try:
        sock.sendall(request_bytes)
        response = _read_until_closed(sock)
    finally:
        sock.close()

    status, headers, body = _parse(response)
    assert status == 400
    assert headers["content-type"] == "application/json"
    assert headers["x-request-id"]
    assert body["error"]["code"] == "bad_request"  # type: ignore[index]


def test_a_request_with_both_content_length_and_chunked_is_refused_and_closed(
    server: tuple[str, int],
) -> None:
    # A proxy that went by Content-Length would forward the whole thing as one request;
    # read as chunked, its tail would be a second request (smuggled past the proxy).
    smuggled = b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
    body = b"0\r\n\r\n" + smuggled
    sock = socket.create_connection(server, timeout=10)
    try:
        sock.sendall(
            b"POST /demo/echo HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer demo-key\r\n"
            b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n"
            b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body
        )
        response = _read_until_closed(sock)
    finally:
        sock.close()

    status, headers, error = _parse(response)  # one response, whole JSON: nothing after it
    assert status == 400
    assert headers["connection"] == "close"
    assert error["error"]["code"] == "bad_request"  # type: ignore[index]


def test_a_body_the_server_cannot_parse_is_a_json_400_and_nothing_else(
    server: tuple[str, int],
) -> None:
    sock = socket.create_connection(server, timeout=10)
    try:
        sock.sendall(
            b"POST /demo/echo HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer demo-key\r\n"
            b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
            b"not-a-chunk-size\r\n"
        )
        response = _read_until_closed(sock)
    finally:
        sock.close()

    status, headers, body = _parse(response)  # one response, whole JSON: nothing after it
    assert status == 400
    assert headers["x-request-id"]
    assert body["error"]["code"] == "bad_request"  # type: ignore[index]


def test_a_refused_body_keeps_the_keep_alive_connection_usable(
    server: tuple[str, int],
) -> None:
    conn = http.client.HTTPConnection(*server, timeout=10)
    try:
        conn.request(
            "POST",
            "/demo/echo",
            body=json.dumps({"message": "a\u0000b"}),
            headers={"Authorization": "Bearer demo-key", "Content-Type": "application/json"},
        )
        refused = conn.getresponse()
        refused_body = json.loads(refused.read())
        conn.request("GET", "/health")
        after = conn.getresponse()
        after.read()
    finally:
        conn.close()

    assert refused.status == 422
    assert refused_body["error"]["details"][0]["type"] == "nul_character"
    assert refused.getheader("X-Request-Id")
    assert after.status == 200


@pytest.fixture
def failing_server(tmp_path: Path) -> Iterator[tuple[str, int]]:
    """The jobrail app with a route that raises, served as `jobrail api` serves it."""
    from jobrail.cli.schema import migrate
    from jobrail.runtime.app import create_app
    from tests.api.conftest import embedded_settings

    settings = embedded_settings(tmp_path)
    migrate(settings, REFERENCE)
    app: FastAPI = create_app(settings, modules=REFERENCE)

    async def boom() -> None:
        raise RuntimeError("boom")

    app.add_api_route("/test-boom", boom)
    port = free_port()
    config = uvicorn.Config(
        app,
        host="127.0.0.1",
        port=port,
        log_config=None,
        **uvicorn_options(
            settings.api.max_header_bytes,
            settings.api.header_timeout_s,
            settings.api.body_timeout_s,
        ),
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    wait_until(lambda: server.started, timeout=30, what="the server to start")
    try:
        yield "127.0.0.1", port
    finally:
        server.should_exit = True
        thread.join(30)


def test_a_500_carries_the_request_id_and_keeps_the_connection(
    failing_server: tuple[str, int],
) -> None:
    conn = http.client.HTTPConnection(*failing_server, timeout=10)
    try:
        conn.request("GET", "/test-boom", headers={"X-Request-Id": "req-boom"})
        failed = conn.getresponse()
        failed_body = json.loads(failed.read())
        conn.request("GET", "/health")
        after = conn.getresponse()
        after.read()
    finally:
        conn.close()

    assert failed.status == 500
    assert failed_body["error"]["code"] == "internal_error"
    assert failed.getheader("X-Request-Id") == "req-boom"
    assert after.status == 200
