"""The API side by side with an earlier revision: CPU per enqueue, A against B.

python -m bench.api_ab REV [--rounds N] [--env KEY=VALUE ...]

A is `jobrail api` from a git worktree of REV (made under /tmp, removed after), B from
this working tree (`--env` settings go to B only). Both serve the same database, Redis
and RabbitMQ at once, and each round loads them one after the other with `POST
/demo/echo` (as bench/api_load.py does), alternating which goes first. The figure to
read is the server's CPU time per request (user + system, from psutil): on a shared
machine it moves far less than requests/s. It still moves: an A/A run here (the same
code on both sides, 5 rounds) gave 0.93 to 1.02 a round, median 0.98, and a single
round up to 1.11. A difference under about 5 % needs more rounds, or an A/A run beside
it to say it is not noise.
"""

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import tempfile
from pathlib import Path

from bench.api_load import ENQUEUE_LIMITS, _free_port, _ready, echo_request, load
from bench.common import PYTHON, ROOT, unique, wait_until
from bench.jobrail_e2e import Stack, cleanup, create_database
from jobrail.store.admin import drop_database


def _env(stack: Stack, src: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBRAIL_")}
    env.update(stack.env(**extra))
    env["PYTHONPATH"] = str(src)
    return env


def _start(
    stack: Stack, src: Path, name: str, extra: dict[str, str]
) -> tuple[subprocess.Popen[bytes], int]:
    port = _free_port()
    env = _env(
        stack,
        src,
        JOBRAIL_API__PORT=str(port),
        JOBRAIL_API_LIMITS__ENQUEUE=ENQUEUE_LIMITS,
        JOBRAIL_API_LIMITS__READ="[]",
        JOBRAIL_METRICS__TOKEN=unique("bench-metrics-"),
        **extra,
    )
    log = Path(tempfile.gettempdir()) / f"jobrail-bench-ab-{name}-{os.getpid()}.log"
    server = subprocess.Popen(
        [PYTHON, "-m", "jobrail.cli", "api"],
        cwd=ROOT,
        env=env,
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    return server, port


async def compare(a: Path, b: Path, rounds: int, env_b: dict[str, str]) -> dict[str, float]:
    url = await create_database()
    stack = Stack(database_url=url, prefix=unique("bench.ab."))
    servers: list[subprocess.Popen[bytes]] = []
    try:
        created = await asyncio.to_thread(
            subprocess.run,
            [PYTHON, "-m", "jobrail.cli", "tenants", "create", "bench"],
            env=_env(stack, b),
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        )
        key = json.loads(created.stdout)["api_key"]
        server_a, port_a = _start(stack, a, "a", {})
        servers.append(server_a)
        server_b, port_b = _start(stack, b, "b", env_b)
        servers.append(server_b)
        await wait_until(lambda: _ready(port_a, "/ready"), 60, "the API (A)", interval=0.2)
        await wait_until(lambda: _ready(port_b, "/ready"), 60, "the API (B)", interval=0.2)
        sides = {"A": (port_a, server_a.pid), "B": (port_b, server_b.pid)}
        cpu: list[float] = []
        rps: list[float] = []
        for i in range(rounds):
            measured = {}
            for name in ("A", "B") if i % 2 == 0 else ("B", "A"):
                port, pid = sides[name]
                measured[name] = await load(port, echo_request(key), 32, 4.0, pid)
            cpu.append(measured["B"]["cpu_ms_per_request"] / measured["A"]["cpu_ms_per_request"])
            rps.append(measured["B"]["rps"] / measured["A"]["rps"])
            print(f"round {i + 1}: A {measured['A']}\n         B {measured['B']}", flush=True)
            print(
                f"         CPU per request B/A {cpu[-1]:.3f}, req/s B/A {rps[-1]:.3f}", flush=True
            )
        return {"cpu_b_over_a": statistics.median(cpu), "rps_b_over_a": statistics.median(rps)}
    finally:
        for server in servers:
            os.killpg(server.pid, 15)
            server.wait(20)
        await cleanup(stack)
        await drop_database(url)


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.api_ab", description=__doc__.split("\n")[0]
    )
    parser.add_argument("rev", help="the revision to compare with (A), e.g. HEAD~1")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--env", action="append", default=[], metavar="KEY=VALUE")
    options = parser.parse_args()
    if options.rounds < 1:
        parser.error("--rounds must be at least 1")
    env_b = {}
    for item in options.env:
        key, sep, value = item.partition("=")
        if not sep or not key:
            parser.error(f"--env takes KEY=VALUE, not {item!r}")
        env_b[key] = value
    with tempfile.TemporaryDirectory(prefix="jobrail-ab-") as scratch:
        tree = Path(scratch) / "a"
        subprocess.run(
            ["git", "worktree", "add", "-q", "--detach", str(tree), options.rev],
            cwd=ROOT,
            check=True,
        )
        try:
            result = asyncio.run(compare(tree / "src", ROOT / "src", options.rounds, env_b))
        finally:
            subprocess.run(
                ["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT, check=False
            )
    print(
        f"median over {options.rounds} rounds: CPU per request B/A {result['cpu_b_over_a']:.3f}, "
        f"req/s B/A {result['rps_b_over_a']:.3f}"
    )


if __name__ == "__main__":
    main()
