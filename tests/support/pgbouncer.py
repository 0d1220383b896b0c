"""PgBouncer in transaction mode on loopback, started by the tests from Debian's binary.

``pgbouncer`` (session scope) runs /usr/sbin/pgbouncer on a free port with its config,
user list, log and pid file in a temporary directory: every database name goes to the
machine's Postgres (127.0.0.1:5432), ``pool_mode = transaction``, with fewer server
connections than the clients open, so that clients share them. It is always stopped at
the end. A missing binary (``make install-pgbouncer``) skips outside CI and fails with
CI=true.

``TESTS_PGBOUNCER=1`` (``make test-pgbouncer``) points the stack fixtures at it: the
session's database is created and migrated through it, and every app, worker and CLI
that ``stack_env`` starts reaches Postgres through it with
``JOBRAIL_DATABASE__POOLER=transaction``. The tests' own reads and truncations
(``direct_database_url``, the ``engine`` fixture) go to Postgres directly.
"""

import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.servers import free_port
from tests.support.services import in_ci, reachable, require

BINARY = Path("/usr/sbin/pgbouncer")
# Server connections per database and user: fewer than the clients of one test's API
# and workers open, so that their transactions take turns on shared server connections.
POOL_SIZE = 8


def enabled() -> bool:
    return os.environ.get("TESTS_PGBOUNCER") == "1"


@dataclass
class PgBouncer:
    port: int
    directory: Path
    process: subprocess.Popen[bytes]

    def url(self, database: str) -> str:
        return f"postgresql+asyncpg://postgres@127.0.0.1:{self.port}/{database}"

    def stats(self, database: str) -> dict[str, int]:
        """PgBouncer's counters for `database` (its admin console's SHOW STATS):
        total_xact_count, total_query_count, ..."""
        console = ["psql", "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres"]
        done = subprocess.run(
            [*console, "-A", "-F", "\t", "-c", "SHOW STATS", "pgbouncer"],
            check=True,
            capture_output=True,
            text=True,
            timeout=30,
        )
        header, *rows = done.stdout.splitlines()
        names = header.split("\t")
        for row in rows:
            values = row.split("\t")
            if values[0] == database:
                return {name: int(value) for name, value in zip(names[1:], values[1:], strict=True)}
        return {}

    def log(self) -> str:
        return (self.directory / "pgbouncer.log").read_text(errors="replace")


def _config(directory: Path, port: int) -> str:
    return f"""\
[databases]
* = host=127.0.0.1 port=5432

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {port}
unix_socket_dir =
auth_type = trust
auth_file = {directory}/userlist.txt
admin_users = postgres
pool_mode = transaction
default_pool_size = {POOL_SIZE}
max_client_conn = 1000
query_wait_timeout = 60
log_connections = 0
log_disconnections = 0
logfile = {directory}/pgbouncer.log
pidfile = {directory}/pgbouncer.pid
"""


def start(timeout: float = 30) -> PgBouncer:
    if not BINARY.is_file():
        message = f"{BINARY} is missing (make install-pgbouncer)"
        if in_ci():
            pytest.fail(message + " (CI=true: the PgBouncer tests may not skip)")
        pytest.skip(message)
    require("postgres")
    directory = Path(tempfile.mkdtemp(prefix="jobrail-pgbouncer-"))
    port = free_port()
    (directory / "userlist.txt").write_text('"postgres" ""\n')
    (directory / "pgbouncer.ini").write_text(_config(directory, port))
    argv = [str(BINARY), str(directory / "pgbouncer.ini")]
    if os.geteuid() == 0:
        # PgBouncer refuses to run as root: it drops to the postgres user, which then
        # writes its log and pid file here.
        shutil.chown(directory, "postgres")
        argv[1:1] = ["-u", "postgres"]
    with (directory / "stderr.log").open("wb") as stderr:
        process = subprocess.Popen(
            argv, stdout=subprocess.DEVNULL, stderr=stderr, start_new_session=True
        )
    bouncer = PgBouncer(port, directory, process)
    deadline = time.monotonic() + timeout
    while not reachable(port, timeout=0.2):
        if process.poll() is not None or time.monotonic() > deadline:
            said = (directory / "stderr.log").read_text(errors="replace")
            stop(bouncer)
            raise RuntimeError(f"pgbouncer did not start: {said}")
        time.sleep(0.05)
    return bouncer


def stop(bouncer: PgBouncer) -> None:
    try:
        if bouncer.process.poll() is None:
            bouncer.process.send_signal(signal.SIGINT)  # PgBouncer's immediate shutdown
            try:
                bouncer.process.wait(15)
            except subprocess.TimeoutExpired:
                bouncer.process.kill()
                bouncer.process.wait(10)
    finally:
        shutil.rmtree(bouncer.directory, ignore_errors=True)


@pytest.fixture(scope="session")
def pgbouncer() -> Iterator[PgBouncer]:
    bouncer = start()
    try:
        yield bouncer
    finally:
        stop(bouncer)
