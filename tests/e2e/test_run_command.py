"""The README's run command: `make run` serves the embedded mode with no services."""

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.processes import ROOT, Process


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture
def embedded_server(tmp_path: Path) -> Iterator[str]:
    port = _free_port()
    server = Process(
        ["make", "--no-print-directory", "-C", str(ROOT), "run"],
        {
            "JOBRAIL_API__PORT": str(port),
            "JOBRAIL_DATABASE__URL": f"sqlite+aiosqlite:///{tmp_path}/run.db",
        },
        name="make-run",
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        assert server.alive(), server.output()[-3000:]
        try:
            if httpx.get(f"{base}/health", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            time.sleep(0.2)
    else:
        server.stop()
        raise AssertionError(f"make run did not serve:\n{server.output()[-3000:]}")
    yield base
    server.stop()


def test_make_run_echoes_a_job_within_two_seconds(embedded_server: str) -> None:
    base = embedded_server

    accepted = httpx.post(f"{base}/demo/echo", json={"message": "hello"}, timeout=5)
    assert accepted.status_code == 202
    job_id = accepted.json()["job_id"]

    deadline = time.monotonic() + 2
    job = httpx.get(f"{base}/jobs/{job_id}", timeout=5).json()
    while job["status"] != "succeeded" and time.monotonic() < deadline:
        time.sleep(0.05)
        job = httpx.get(f"{base}/jobs/{job_id}", timeout=5).json()

    assert job["status"] == "succeeded", job
    assert job["result"] == {"echo": "hello"}
    ready = httpx.get(f"{base}/ready", timeout=5)
    assert ready.json() == {"status": "ready", "checks": {"database": "ok", "broker": "ok"}}
