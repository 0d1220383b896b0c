"""How `jobrail run` (and `jobrail api`, the same server) stops, as an operator sees it
(jobrail.http.server.JobrailServer): an open event stream does not hold the shutdown,
and Ctrl-C again while it waits, as uvicorn's log invites, stops at once with the app's
own shutdown run and no traceback."""

import json
import signal
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.processes import Process, start_embedded, wait_until

DEMO = {"Authorization": "Bearer demo-key"}


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, Process]]:
    """`jobrail run` whose running jobs would get ten minutes' grace at shutdown."""
    base, server = start_embedded(
        tmp_path,
        {"JOBRAIL_WORKER__SHUTDOWN_GRACE_S": "600", "JOBRAIL_SCHEDULER__EMBEDDED": "false"},
    )
    try:
        yield base, server
    finally:
        server.kill()


class Stream(threading.Thread):
    """Follows the event feed until the server ends the stream; `error` is what broke
    it, if it did not end as a whole response."""

    def __init__(self, base: str) -> None:
        super().__init__(daemon=True)
        self.base = base
        self.opened = threading.Event()
        self.error: BaseException | None = None
        self.received = b""

    def run(self) -> None:
        headers = {**DEMO, "Accept": "text/event-stream"}
        try:
            with httpx.stream("GET", f"{self.base}/events", headers=headers, timeout=None) as r:
                self.opened.set()
                for chunk in r.iter_bytes():
                    self.received += chunk
        except BaseException as exc:  # the assertion reports it
            self.error = exc
        finally:
            self.opened.set()


def _sleeping_job(base: str) -> str:
    response = httpx.post(
        f"{base}/demo/echo", headers=DEMO, json={"message": "slow", "sleep_ms": 60_000}
    )
    job_id: str = response.json()["job_id"]

    def running() -> bool:
        got = httpx.get(f"{base}/jobs/{job_id}", headers=DEMO, timeout=5).json()
        return bool(got["status"] == "running")

    wait_until(running, 60, "the job to run")
    return job_id


def _exited(server: Process, timeout: float = 90) -> int:
    deadline = time.monotonic() + timeout
    while server.alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not server.alive(), f"still running:\n{server.output()[-3000:]}"
    return int(server.proc.returncode)


def _said_in_trouble(server: Process) -> list[str]:
    """What it logged at error level or above, and any traceback."""
    records = server.log_records()
    said = [r["msg"] for r in records if r.get("level") in ("error", "critical")]
    said += [r["msg"] for r in records if "Traceback" in json.dumps(r)]
    if "Traceback" in server.output():
        said.append(server.output()[-3000:])
    return said


def _messages(server: Process) -> list[str]:
    return [str(r.get("msg")) for r in server.log_records()]


def test_sigterm_ends_an_open_event_stream_and_runs_the_app_s_shutdown(
    served: tuple[str, Process],
) -> None:
    # uvicorn waits for every response under way to end, and an event stream's never
    # did: SIGTERM waited for the SIGKILL after it, and the app's shutdown never ran.
    base, server = served
    stream = Stream(base)
    stream.start()
    assert stream.opened.wait(30)
    wait_until(lambda: b"retry:" in stream.received, 30, "the stream's first frame")

    server.proc.send_signal(signal.SIGTERM)

    # Shut down, uvicorn raises the SIGTERM again for its default handler.
    assert _exited(server) == -signal.SIGTERM
    stream.join(30)
    assert not stream.is_alive()
    assert stream.error is None  # a whole response: its client reconnects and resumes
    assert "Application shutdown complete." in _messages(server)
    assert _said_in_trouble(server) == []


def test_ctrl_c_again_while_it_waits_stops_at_once_and_still_shuts_the_app_down(
    served: tuple[str, Process],
) -> None:
    base, server = served
    _sleeping_job(base)
    # A request whose body never comes: the shutdown waits for it.
    held = socket.create_connection(("127.0.0.1", int(base.rsplit(":", 1)[1])))
    try:
        held.sendall(
            b"POST /demo/echo HTTP/1.1\r\nHost: api\r\nAuthorization: Bearer demo-key\r\n"
            b'Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{"mes'
        )
        # Answered once the server's loop has read what came before it on the other
        # connection: the held request is in the app, which waits for its body.
        assert httpx.get(f"{base}/health", timeout=30).status_code == 200
        server.proc.send_signal(signal.SIGINT)
        wait_until(
            lambda: "Waiting for connections to close. (CTRL+C to force quit)" in _messages(server),
            30,
            "the server to wait for the held request",
        )

        server.proc.send_signal(signal.SIGINT)

        # Not the ten minutes' grace of its running job: that job stays claimed and
        # resumes when the process starts again.
        assert _exited(server) == 0
    finally:
        held.close()
    messages = _messages(server)
    assert "stopped 1 unfinished jobs at shutdown" in messages
    assert "Application shutdown complete." in messages
    assert _said_in_trouble(server) == []


def test_ctrl_c_again_while_the_app_shuts_down_hurries_that_shutdown_once(
    served: tuple[str, Process],
) -> None:
    base, server = served
    _sleeping_job(base)
    server.proc.send_signal(signal.SIGINT)
    # The app's shutdown gives the running job its ten minutes' grace.
    wait_until(
        lambda: "Waiting for application shutdown." in _messages(server),
        30,
        "the app's shutdown to start",
    )

    server.proc.send_signal(signal.SIGINT)

    assert _exited(server) == 0
    messages = _messages(server)
    assert "stopped 1 unfinished jobs at shutdown" in messages
    assert messages.count("Waiting for application shutdown.") == 1
    assert messages.count("Application shutdown complete.") == 1
    assert _said_in_trouble(server) == []
