"""SIGTERM stops every jobrail process within its graceful timeout, whatever its services
are doing: unreachable from the start (a worker used to wait for RabbitMQ for ever,
deaf to SIGTERM and SIGINT), or lost while it runs (reconnecting).

The signal goes to the process an orchestrator started (Taskiq's worker manager, not
its children), as Kubernetes or systemd send it; the whole process group must be gone.
A service is unreachable on a loopback port nothing listens on, or lost through this
test's own proxy: the machine's services are not touched.
"""

import asyncio
import os
import signal
import time
from collections.abc import Callable, Iterator

import pytest

from tests.support.processes import BIN, Process
from tests.support.rabbit import RabbitProbe
from tests.support.servers import free_port
from tests.support.tcp_proxy import TcpProxy

GRACE_S = 5
# What a stop may take beyond the grace: the interpreter's exit and the manager's
# one-second poll of its children, on a busy machine.
SLACK_S = 20

URL_SETTING = {
    "postgres": "JOBRAIL_DATABASE__URL",
    "rabbitmq": "JOBRAIL_RABBIT__URL",
    "redis": "JOBRAIL_REDIS__URL",
}
PORTS = {"postgres": 5432, "rabbitmq": 5672, "redis": 6379}

# What each process says once it is up far enough to be waiting on the service.
STARTED = {
    "api": "Application startup complete",
    "worker": "jobrail.broker",
    "scheduler": "scheduler.started",
    "run": "Application startup complete",
}


def _url(env: dict[str, str], service: str, port: int) -> str:
    """The service's URL in `env`, pointed at `port` on loopback."""
    url = env[URL_SETTING[service]]
    return url.replace(f"127.0.0.1:{PORTS[service]}", f"127.0.0.1:{port}")


def _start(command: str, env: dict[str, str]) -> Process:
    settings = {
        **env,
        "JOBRAIL_API__PORT": str(free_port()),
        "JOBRAIL_WORKER__SHUTDOWN_GRACE_S": str(GRACE_S),
        # A leader that loses Redis must not wait out a long leadership.
        "JOBRAIL_SCHEDULER__LEADER_TTL_S": "5",
    }
    return Process([str(BIN / "jobrail"), command], settings, name=command)


async def _wait_for(process: Process, text: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while text not in process.output():
        assert process.alive(), f"{process.name} exited:\n{process.output()[-3000:]}"
        assert time.monotonic() < deadline, f"no {text!r}:\n{process.output()[-3000:]}"
        await asyncio.sleep(0.1)


async def _stops_on_sigterm(process: Process) -> None:
    """SIGTERM to the process itself; it and every process of its group end in time."""
    started = time.monotonic()
    os.kill(process.pid, signal.SIGTERM)
    try:
        while time.monotonic() - started < GRACE_S + SLACK_S:
            try:
                os.killpg(process.pid, 0)
            except ProcessLookupError:
                break
            process.proc.poll()
            await asyncio.sleep(0.1)
        else:
            pytest.fail(
                f"{process.name} still running {GRACE_S + SLACK_S} s after SIGTERM:\n"
                f"{process.output()[-3000:]}"
            )
    finally:
        process.kill()
    assert "Traceback" not in process.output(), process.output()[-3000:]


@pytest.fixture
def processes(rabbit: RabbitProbe) -> Iterator[Callable[[str, dict[str, str]], Process]]:
    """Start processes, killed at the end; `rabbit` deletes the queues they declared
    (each quorum queue left behind holds RabbitMQ's file handles for good)."""
    started: list[Process] = []

    def start(command: str, env: dict[str, str]) -> Process:
        process = _start(command, env)
        started.append(process)
        return process

    yield start
    for process in started:
        process.kill()


@pytest.mark.parametrize("command", ["api", "worker", "scheduler"])
async def test_a_process_whose_service_is_unreachable_from_the_start_stops_on_sigterm(
    command: str,
    stack_env: dict[str, str],
    processes: Callable[[str, dict[str, str]], Process],
) -> None:
    """One process per service (side by side: most of a case is waiting)."""

    async def case(service: str) -> None:
        nothing_listens = free_port()
        env = {**stack_env, URL_SETTING[service]: _url(stack_env, service, nothing_listens)}
        process = processes(command, env)
        await _wait_for(process, STARTED[command])
        await asyncio.sleep(1.5)  # into its retries
        await _stops_on_sigterm(process)

    await asyncio.gather(*(case(service) for service in URL_SETTING))


@pytest.mark.parametrize(
    ("command", "service"),
    [
        ("worker", "rabbitmq"),
        ("worker", "postgres"),
        ("worker", "redis"),
        ("api", "rabbitmq"),
        ("api", "postgres"),
        ("scheduler", "redis"),
        ("scheduler", "postgres"),
    ],
)
async def test_a_process_that_loses_its_service_stops_on_sigterm_while_reconnecting(
    command: str,
    service: str,
    stack_env: dict[str, str],
    processes: Callable[[str, dict[str, str]], Process],
) -> None:
    async with TcpProxy(PORTS[service]) as proxy:
        env = {**stack_env, URL_SETTING[service]: _url(stack_env, service, proxy.port)}
        process = processes(command, env)
        await _wait_for(process, STARTED[command])
        await asyncio.sleep(1)
        await proxy.take_down()
        await asyncio.sleep(2)  # its connections are gone, and connecting is refused
        await _stops_on_sigterm(process)


async def test_the_embedded_mode_stops_on_sigterm_when_its_database_is_lost(
    stack_env: dict[str, str],
    processes: Callable[[str, dict[str, str]], Process],
) -> None:
    async with TcpProxy(PORTS["postgres"]) as proxy:
        env = {
            "JOBRAIL_MODE": "embedded",
            "JOBRAIL_ENVIRONMENT": "test",
            "JOBRAIL_DATABASE__URL": _url(stack_env, "postgres", proxy.port),
        }
        process = processes("run", env)
        await _wait_for(process, STARTED["run"])
        await asyncio.sleep(1)
        await proxy.take_down()
        await asyncio.sleep(2)
        await _stops_on_sigterm(process)


@pytest.mark.parametrize("command", ["api", "worker", "scheduler"])
async def test_a_process_stops_on_sigterm_while_it_starts(
    command: str,
    stack_env: dict[str, str],
    processes: Callable[[str, dict[str, str]], Process],
) -> None:
    """Early: while it imports; later: while it connects (RabbitMQ never answers)."""
    env = {**stack_env, URL_SETTING["rabbitmq"]: _url(stack_env, "rabbitmq", free_port())}

    async def case(after_s: float) -> None:
        process = processes(command, env)
        await asyncio.sleep(after_s)
        await _stops_on_sigterm(process)

    await asyncio.gather(*(case(after_s) for after_s in (0.3, 1.0, 2.0)))
