"""A three-node RabbitMQ cluster on loopback, started by the tests from the machine's
``rabbitmq-server``, never touching the machine's own node (``rabbit@<host>`` on 5672).

Each node has its own name (``jr1@localhost`` ...), AMQP port (5681 ...), distribution
port (AMQP port + 20000), no plugins, and its data, logs, config and env file in a
temporary directory; the nodes share an Erlang cookie in a temporary ``HOME``. The env
file is the node's own, so the machine's ``/etc/rabbitmq/rabbitmq-env.conf`` (which names
the machine's node) is never read. Nodes two and three join the first with
``rabbitmqctl -n jrX@localhost stop_app / join_cluster / start_app``; every
``rabbitmqctl`` call names its node with ``-n``. Teardown stops each node
(``rabbitmqctl -n ... stop``) and then kills its process group, whatever happened.
A missing binary skips outside CI and fails with CI=true.
"""

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.support.services import in_ci

BIN_DIR = Path("/usr/lib/rabbitmq/bin")
FIRST_PORT = 5681
DIST_OFFSET = 20000
COOKIE = "JOBRAILTESTCLUSTERCOOKIE"


@dataclass
class RabbitNode:
    name: str
    port: int
    directory: Path
    process: subprocess.Popen[bytes] | None = None

    @property
    def pid_file(self) -> str:
        return str(self.directory / "pid")

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"


@dataclass
class RabbitCluster:
    nodes: list[RabbitNode]
    directory: Path
    started_in_s: float = 0.0
    stopped: set[str] = field(default_factory=set)

    def url(self, order: list[int] | None = None) -> str:
        """The comma-host URL of the nodes, in `order` (indexes; all of them by default)."""
        chosen = [self.nodes[i] for i in (order or range(len(self.nodes)))]
        return f"amqp://guest:guest@{','.join(n.address for n in chosen)}/"

    def ctl(self, node: RabbitNode, *args: str, timeout: float = 60) -> str:
        done = subprocess.run(
            [_binary("rabbitmqctl"), "-n", node.name, *args],
            env=_env(self.directory, node),
            cwd=self.directory,  # where Erlang drops a crash dump, if it writes one
            check=False,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if done.returncode != 0:
            raise RuntimeError(f"rabbitmqctl -n {node.name} {' '.join(args)}: {done.stderr}")
        return done.stdout

    def stop_node(self, node: RabbitNode) -> None:
        """Stop `node` the way an operator does (its clients see a connection close)."""
        self.stopped.add(node.name)
        with contextlib.suppress(RuntimeError, subprocess.TimeoutExpired):
            self.ctl(node, "stop", timeout=60)
        _reap(node)

    def running(self) -> list[str]:
        """The nodes the first running node sees running."""
        for node in self.nodes:
            if node.name in self.stopped:
                continue
            text = self.ctl(node, "eval", "rabbit_nodes:all_running().")
            return sorted(n for n in self._names() if n in text)
        return []

    def _names(self) -> list[str]:
        return [node.name for node in self.nodes]


def _binary(name: str) -> str:
    candidate = BIN_DIR / name
    if candidate.exists():
        return str(candidate)
    found = shutil.which(name)
    if found is None:
        raise FileNotFoundError(name)
    return found


def _require_binaries() -> None:
    missing = []
    for name in ("rabbitmq-server", "rabbitmqctl"):
        try:
            _binary(name)
        except FileNotFoundError:
            missing.append(name)
    if missing:
        message = f"{' and '.join(missing)} not found: the RabbitMQ cluster tests need them"
        if in_ci():
            pytest.fail(message + " (CI=true: integration tests may not skip)")
        pytest.skip(message)


def _env(directory: Path, node: RabbitNode) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("RABBITMQ_")}
    env.update(
        HOME=str(directory / "home"),
        RABBITMQ_CONF_ENV_FILE=str(node.directory / "rabbitmq-env.conf"),
        RABBITMQ_NODENAME=node.name,
        RABBITMQ_NODE_IP_ADDRESS="127.0.0.1",
        RABBITMQ_NODE_PORT=str(node.port),
        RABBITMQ_DIST_PORT=str(node.port + DIST_OFFSET),
        RABBITMQ_MNESIA_BASE=str(node.directory / "mnesia"),
        RABBITMQ_LOG_BASE=str(node.directory / "log"),
        RABBITMQ_CONFIG_FILE=str(node.directory / "rabbitmq.conf"),
        RABBITMQ_ENABLED_PLUGINS_FILE=str(node.directory / "enabled_plugins"),
        RABBITMQ_PID_FILE=node.pid_file,
        ERL_EPMD_ADDRESS="127.0.0.1",
    )
    return env


def _prepare(directory: Path, count: int, first_port: int) -> list[RabbitNode]:
    home = directory / "home"
    home.mkdir()
    cookie = home / ".erlang.cookie"
    cookie.write_text(COOKIE)
    cookie.chmod(0o400)
    nodes = []
    for i in range(count):
        node = RabbitNode(f"jr{i + 1}@localhost", first_port + i, directory / f"jr{i + 1}")
        node.directory.mkdir()
        (node.directory / "enabled_plugins").write_text("[].\n")
        (node.directory / "rabbitmq.conf").write_text(
            f"listeners.tcp.default = 127.0.0.1:{node.port}\n"
            "loopback_users = none\n"
            "log.console = false\n"
        )
        (node.directory / "rabbitmq-env.conf").write_text(f"NODENAME={node.name}\n")
        nodes.append(node)
    return nodes


def start_cluster(
    count: int = 3, first_port: int = FIRST_PORT, timeout: float = 120
) -> RabbitCluster:
    _require_binaries()
    began = time.monotonic()
    cluster = RabbitCluster([], Path(tempfile.mkdtemp(prefix="jobrail-rabbit-cluster-")))
    try:
        cluster.nodes = _prepare(cluster.directory, count, first_port)
        for node in cluster.nodes:
            node.process = subprocess.Popen(
                [_binary("rabbitmq-server")],
                env=_env(cluster.directory, node),
                cwd=cluster.directory,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,  # its own process group, killed at teardown
            )
        # `wait` waits for a node's pid file, then for it to boot.
        _on_each(cluster.nodes, lambda n: cluster.ctl(n, "wait", n.pid_file, timeout=timeout))
        # The others join the first one at a time; stopping and starting their apps
        # goes on side by side (start_app returns once the app has started).
        first, others = cluster.nodes[0], cluster.nodes[1:]
        _on_each(others, lambda n: cluster.ctl(n, "stop_app"))
        for node in others:
            cluster.ctl(node, "join_cluster", first.name)
        _on_each(others, lambda n: cluster.ctl(n, "start_app", timeout=timeout))
        running = cluster.running()
        if running != sorted(n.name for n in cluster.nodes):
            raise RuntimeError(f"the cluster formed with {running} only")
    except BaseException:
        stop_cluster(cluster)
        raise
    cluster.started_in_s = time.monotonic() - began
    return cluster


def _on_each(nodes: list[RabbitNode], do: Callable[[RabbitNode], object]) -> None:
    """`do` on every node at once (threads: each is a CLI call); the first error raises."""
    with ThreadPoolExecutor(max(1, len(nodes))) as pool:
        for done in [pool.submit(do, node) for node in nodes]:
            done.result()


def _reap(node: RabbitNode) -> None:
    process = node.process
    if process is None:
        return
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(30)
    # The server script runs the Erlang VM (and epmd's helpers) in its group.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(10)


def _stop_node(cluster: RabbitCluster, node: RabbitNode) -> None:
    if node.process is not None and node.name not in cluster.stopped:
        with contextlib.suppress(RuntimeError, subprocess.TimeoutExpired):
            cluster.ctl(node, "stop", timeout=60)
    _reap(node)


def stop_cluster(cluster: RabbitCluster) -> None:
    """Stop every node (all at once), then kill what is left of their process groups."""
    try:
        _on_each(cluster.nodes, lambda node: _stop_node(cluster, node))
    finally:
        for node in cluster.nodes:
            if node.process is not None and node.process.poll() is None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(node.process.pid, signal.SIGKILL)
        shutil.rmtree(cluster.directory, ignore_errors=True)


@pytest.fixture
def rabbit_cluster() -> Iterator[RabbitCluster]:
    """A three-node RabbitMQ cluster of this test's own (a fault test stops its nodes)."""
    cluster = start_cluster()
    try:
        yield cluster
    finally:
        stop_cluster(cluster)
