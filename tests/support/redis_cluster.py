"""A Redis Cluster on loopback, started by the tests with ``redis-server``: three masters,
or three masters with a replica each (`six_node_cluster`, for failovers).

Each node runs with ``cluster-enabled yes``, its cluster config file in a temporary
directory and no persistence; ``redis-cli --cluster create ... --cluster-replicas N``
joins them. The fixtures wait until every node reports ``cluster_state:ok`` (and every
replica is in sync) and shut the nodes down at the end, whatever the test did to them
(`RedisCluster.kill` sends SIGKILL to a node, `RedisCluster.restart` starts it again
with its cluster config file). The binaries are part of this project's machine
(Debian's redis-server, /usr/bin): a missing one skips outside CI and fails with CI=true.
"""

import random
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from redis.asyncio import Redis
from redis.asyncio import RedisCluster as AsyncRedisCluster

from tests.support.services import REDIS_URL, in_ci, require

# The cluster bus of a node listens on its port + 10000.
BUS_OFFSET = 10000


# A failed master is replaced by its replica after about a second, and a shard that is
# down (master and replica) does not stop the cluster serving the others' slots.
FAILOVER_OPTIONS = (
    "--cluster-node-timeout",
    "1000",
    "--cluster-require-full-coverage",
    "no",
)


@dataclass
class RedisCluster:
    ports: list[int]
    directory: Path
    options: tuple[str, ...] = ()
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def start_node(self, port: int) -> subprocess.Popen[bytes]:
        node_dir = self.directory / str(port)
        node_dir.mkdir(exist_ok=True)
        return subprocess.Popen(
            [
                "redis-server",
                "--port",
                str(port),
                "--bind",
                "127.0.0.1",
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                str(node_dir / "nodes.conf"),
                "--dir",
                str(node_dir),
                "--save",
                "",
                "--appendonly",
                "no",
                "--logfile",
                str(node_dir / "redis.log"),
                *self.options,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    def kill(self, port: int) -> None:
        """SIGKILL the node: no goodbye to its clients or to the other nodes."""
        process = self.processes[self.ports.index(port)]
        process.send_signal(signal.SIGKILL)
        process.wait(10)

    def restart(self, port: int) -> None:
        """Start a killed node again (its data is gone; its cluster config is kept)."""
        self.processes[self.ports.index(port)] = self.start_node(port)
        _wait(lambda: self.cli(port, "ping").strip() == "PONG", 30)

    def shards(self) -> dict[int, list[int]]:
        """The masters' ports and, for each, its replicas' ports, as a live node sees
        them (CLUSTER NODES; failed nodes left out)."""
        for port in self.ports:
            listing = self.cli(port, "cluster", "nodes")
            if listing:
                break
        ids: dict[str, int] = {}
        replicas: list[tuple[str, int]] = []
        for line in listing.splitlines():
            node_id, address, flags, master = line.split()[:4]
            node_port = int(address.split("@")[0].rsplit(":", 1)[1])
            if "fail" in flags.split(",") or "noaddr" in flags:
                continue
            if "master" in flags:
                ids[node_id] = node_port
            else:
                replicas.append((master, node_port))
        shards: dict[int, list[int]] = {port: [] for port in ids.values()}
        for master, node_port in replicas:
            if master in ids:
                shards[ids[master]].append(node_port)
        return shards

    def state_ok(self, port: int) -> bool:
        return "cluster_state:ok" in self.cli(port, "cluster", "info")

    @property
    def url(self) -> str:
        """One node's URL: the client discovers the others from it."""
        return f"redis://127.0.0.1:{self.ports[0]}/0"

    def cli(self, port: int, *args: str) -> str:
        done = subprocess.run(
            ["redis-cli", "-h", "127.0.0.1", "-p", str(port), *args],
            check=False,
            capture_output=True,
            text=True,
            timeout=30,
        )
        return done.stdout if done.returncode == 0 else ""

    def commandstat_calls(self, *commands: str) -> int:
        """Calls of `commands` counted by every node (INFO commandstats)."""
        total = 0
        for port in self.ports:
            for line in self.cli(port, "info", "commandstats").splitlines():
                name, _, stats = line.partition(":")
                if name in {f"cmdstat_{command}" for command in commands}:
                    calls = dict(part.split("=", 1) for part in stats.split(","))["calls"]
                    total += int(calls)
        return total


def _free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _free_ports(count: int) -> list[int]:
    """Ports free on loopback whose cluster bus port (+10000) is free as well."""
    ports: list[int] = []
    while len(ports) < count:
        port = random.randrange(20000, 40000)
        if port not in ports and _free(port) and _free(port + BUS_OFFSET):
            ports.append(port)
    return ports


def _require_binaries() -> None:
    missing = [name for name in ("redis-server", "redis-cli") if shutil.which(name) is None]
    if missing:
        message = f"{' and '.join(missing)} not found: the Redis Cluster tests need them"
        if in_ci():
            pytest.fail(message + " (CI=true: integration tests may not skip)")
        pytest.skip(message)


def start_cluster(
    masters: int = 3, replicas: int = 0, options: tuple[str, ...] = (), timeout: float = 60
) -> RedisCluster:
    """`replicas` per master; `options` are added to every node's command line
    (``--cluster-node-timeout``, ...)."""
    _require_binaries()
    nodes = masters * (1 + replicas)
    cluster = RedisCluster(
        _free_ports(nodes), Path(tempfile.mkdtemp(prefix="jobrail-cluster-")), options
    )
    try:
        for port in cluster.ports:
            cluster.processes.append(cluster.start_node(port))
        _wait(lambda: all(cluster.cli(p, "ping").strip() == "PONG" for p in cluster.ports), timeout)
        created = subprocess.run(
            [
                "redis-cli",
                "--cluster",
                "create",
                *(f"127.0.0.1:{port}" for port in cluster.ports),
                "--cluster-replicas",
                str(replicas),
                "--cluster-yes",
            ],
            check=False,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if created.returncode != 0:
            raise RuntimeError(f"redis-cli --cluster create failed:\n{created.stdout}")
        _wait(
            lambda: all(
                "cluster_state:ok" in cluster.cli(port, "cluster", "info") for port in cluster.ports
            ),
            timeout,
        )
        if replicas:
            _wait(lambda: _replicas_in_sync(cluster) == masters * replicas, timeout)
    except BaseException:
        stop_cluster(cluster)
        raise
    return cluster


def _replicas_in_sync(cluster: RedisCluster) -> int:
    replication = [cluster.cli(port, "info", "replication") for port in cluster.ports]
    return sum("role:slave" in r and "master_link_status:up" in r for r in replication)


def stop_cluster(cluster: RedisCluster) -> None:
    for port, process in zip(cluster.ports, cluster.processes, strict=False):
        cluster.cli(port, "shutdown", "nosave")
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)
    shutil.rmtree(cluster.directory, ignore_errors=True)


def _wait(condition: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.1)
    raise RuntimeError("the Redis Cluster did not come up in time")


@pytest.fixture
def six_node_cluster() -> Iterator[RedisCluster]:
    """Three masters with a replica each (`FAILOVER_OPTIONS`), of this test's own: it
    may kill and restart nodes. Every node is stopped at the end."""
    cluster = start_cluster(replicas=1, options=FAILOVER_OPTIONS)
    try:
        yield cluster
    finally:
        stop_cluster(cluster)


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[RedisCluster]:
    """A three-master Redis Cluster of this test session's own."""
    cluster = start_cluster()
    yield cluster
    stop_cluster(cluster)


# The two Redis deployments the limits tests run against: `request.param` of a fixture
# parametrised with REDIS_KINDS.
REDIS_KINDS = ["redis", "cluster"]


def redis_env(kind: str, request: pytest.FixtureRequest) -> dict[str, str]:
    """The settings (as environment) that point a process at Redis of that kind."""
    if kind == "cluster":
        cluster: RedisCluster = request.getfixturevalue("redis_cluster")
        return {"JOBRAIL_REDIS__URL": cluster.url, "JOBRAIL_REDIS__CLUSTER": "true"}
    return {"JOBRAIL_REDIS__URL": REDIS_URL, "JOBRAIL_REDIS__CLUSTER": "false"}


Connect = Callable[[], "Redis | AsyncRedisCluster"]


@pytest.fixture(scope="session", params=REDIS_KINDS)
def redis_connect(request: pytest.FixtureRequest) -> Connect:
    """Makes clients of a single Redis, then (second parameter) of the Redis Cluster."""
    if request.param == "cluster":
        cluster: RedisCluster = request.getfixturevalue("redis_cluster")
        return lambda: AsyncRedisCluster.from_url(cluster.url)
    require("redis")
    return lambda: Redis.from_url(REDIS_URL)
