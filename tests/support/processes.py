"""Worker and API processes started by tests, with their logs kept for assertions."""

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


class Process:
    def __init__(
        self,
        argv: list[str],
        env: dict[str, str],
        name: str,
        *,
        cwd: Path = ROOT,
        unset: tuple[str, ...] = (),
    ) -> None:
        """`argv` in `cwd`, with this environment but its JOBRAIL_* settings and the
        variables in `unset`, and with `env`."""
        self.name = name
        self._log = tempfile.NamedTemporaryFile(  # noqa: SIM115 - lives as long as the process
            prefix=f"jobrail-{name}-", suffix=".log", delete=False
        )
        full_env = {k: v for k, v in os.environ.items() if not k.startswith("JOBRAIL_")}
        for key in unset:
            full_env.pop(key, None)
        full_env.update(env)
        self.proc = subprocess.Popen(
            argv,
            cwd=cwd,
            env=full_env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self._asked_to_stop = False

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def output(self) -> str:
        return Path(self._log.name).read_text(errors="replace")

    def log_records(self) -> list[dict[str, Any]]:
        records = []
        for line in self.output().splitlines():
            if line.startswith("{"):
                try:
                    records.append(json.loads(line))
                except ValueError:
                    continue
        return records

    def kill(self) -> None:
        """SIGKILL the whole process group (taskiq runs its workers as children)."""
        if self.alive():
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def ask_to_stop(self) -> None:
        """SIGTERM the process group, once: a second signal could mean a forced stop."""
        if self.alive() and not self._asked_to_stop:
            self._asked_to_stop = True
            with contextlib.suppress(ProcessLookupError):  # it has just ended
                os.killpg(self.proc.pid, signal.SIGTERM)

    def terminate(self, timeout: float = 30) -> int:
        if self.alive():
            self.ask_to_stop()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        return self.proc.returncode

    def stop(self) -> None:
        self.terminate(timeout=15)
        self._log.close()


def stop_all(processes: list[Process]) -> None:
    """Stop `processes` together: each is asked to stop before the first is waited for,
    so that their shutdown graces overlap instead of adding up."""
    for process in processes:
        process.ask_to_stop()
    for process in processes:
        process.stop()


def start_worker(env: dict[str, str], name: str = "worker") -> Process:
    return Process([str(BIN / "jobrail"), "worker"], env, name)


def wait_until(condition: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def start_embedded(
    tmp_path: Path, env: dict[str, str], timeout: float = 120
) -> tuple[str, Process]:
    """`jobrail run` (embedded mode, its SQLite file in `tmp_path`) on a free port, with
    `env`, once it answers `GET /health`: its base URL and its process."""
    from tests.support.servers import free_port

    port = free_port()
    server = Process(
        [str(BIN / "jobrail"), "run"],
        {
            "JOBRAIL_MODE": "embedded",
            "JOBRAIL_API__PORT": str(port),
            "JOBRAIL_DATABASE__URL": f"sqlite+aiosqlite:///{tmp_path}/run.db",
            **env,
        },
        name="jobrail-run",
    )
    base = f"http://127.0.0.1:{port}"

    def serving() -> bool:
        assert server.alive(), server.output()[-3000:]
        try:
            return httpx.get(f"{base}/health", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        wait_until(serving, timeout, "jobrail run to serve")
    except BaseException:
        server.kill()
        raise
    return base, server


def run_jobrail(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """`jobrail ARGS` run to its end, with this environment but its JOBRAIL_* settings,
    and with `env`."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("JOBRAIL_")}
    full_env.update(env)
    return subprocess.run(
        [str(BIN / "jobrail"), *args],
        cwd=ROOT,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
