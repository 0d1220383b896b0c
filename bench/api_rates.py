"""CPU per request against the rate: `jobrail api` (`POST /jobs`, dispatch off) and the
insert-then-`.kiq()` peer (`POST /insert-kiq`), at steady rates (an open loop, as
`bench.fair_dispatch`'s time to start sends) and at concurrency 1 and 32 (closed loops,
as `bench.api_load`), in alternating order at each load.

Beside the CPU (user and system apart): per request, the server's voluntary context
switches (each a sleep of its event loop with nothing to do: a wake-up), and its read
and write system calls (`/proc/<pid>/io`).

python -m bench.api_rates [--rates 50,200,800] [--seconds 5]

No worker runs: the jobs wait in their queues, removed at the end.
"""

import argparse
import asyncio
import json
from dataclasses import dataclass
from typing import Any

import psutil

from bench.api_load import ECHO_BODY, _request, jobrail_api, load, peer_api
from bench.common import unique
from bench.fair_dispatch import Connections, FairStack, paced
from bench.jobrail_e2e import cleanup, create_database
from jobrail.store.admin import drop_database

STAMP_BODY = json.dumps({"type": "bench.stamp", "payload": {}}).encode()


def counters(pid: int) -> dict[str, float]:
    process = psutil.Process(pid)
    cpu, switches, io = process.cpu_times(), process.num_ctx_switches(), process.io_counters()
    return {
        "user": cpu.user,
        "system": cpu.system,
        "wakeups": switches.voluntary,
        "syscalls": io.read_count + io.write_count,
    }


def per_request(before: dict[str, float], after: dict[str, float], n: int) -> dict[str, float]:
    d = {k: after[k] - before[k] for k in before}
    return {
        "cpu_ms": round(1000 * (d["user"] + d["system"]) / n, 3),
        "system_ms": round(1000 * d["system"] / n, 3),
        "wakeups": round(d["wakeups"] / n, 2),
        "syscalls": round(d["syscalls"] / n, 1),
    }


@dataclass
class Server:
    pid: int
    port: int
    path: str
    body: bytes
    key: str = ""


async def at_rate(server: Server, rate: float, seconds: float) -> dict[str, Any]:
    """Requests sent at `rate` a second whatever the ones before wait for (an open loop)."""
    connections = Connections(server.port)

    async def send() -> str:
        return str((await connections.post(server.path, server.body, server.key))["job_id"])

    await paced(send, rate, 1.0, warm_up_s=0)  # connections opened, not counted
    before = counters(server.pid)
    sent = await paced(send, rate, seconds, warm_up_s=0)
    figures = per_request(before, counters(server.pid), sent["total"])
    connections.close()
    return {**figures, "answered_p50_ms": sent["answered_p50_ms"]}


async def at_concurrency(server: Server, concurrency: int, seconds: float) -> dict[str, Any]:
    """`concurrency` clients, each sending its next request once answered (a closed loop)."""
    request = _request("POST", server.path, server.body, server.key)
    await load(server.port, request, concurrency, 1.0)
    before = counters(server.pid)
    measured = await load(server.port, request, concurrency, seconds)
    n = round(measured["rps"] * seconds)
    return {**per_request(before, counters(server.pid), n), "answered_p50_ms": measured["p50_ms"]}


async def run(rates: list[float], seconds: float) -> list[dict[str, Any]]:
    url = await create_database()
    stack = FairStack(database_url=url, prefix=unique("bench."))  # bench.stamp, dispatch off
    loads = [("rate", rate) for rate in rates] + [("concurrency", 1), ("concurrency", 32)]
    rows: list[dict[str, Any]] = []
    try:
        async with jobrail_api(stack) as (api, port, key), peer_api(url) as (peer, peer_port):
            servers = {
                "jobrail": Server(api.popen.pid, port, "/jobs", STAMP_BODY, key),
                "peer": Server(peer.popen.pid, peer_port, "/insert-kiq", ECHO_BODY),
            }
            for n, (kind, value) in enumerate(loads):
                row: dict[str, Any] = {
                    "load": f"{value:g}/s" if kind == "rate" else f"{kind} {value}"
                }
                for name in ("jobrail", "peer") if n % 2 == 0 else ("peer", "jobrail"):
                    if kind == "rate":
                        row[name] = await at_rate(servers[name], value, seconds)
                    else:
                        row[name] = await at_concurrency(servers[name], int(value), seconds)
                rows.append(row)
                print(json.dumps(row), flush=True)
    finally:
        await cleanup(stack)
        await drop_database(url)
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| load | CPU ms/req jobrail / peer | of which system | wake-ups/req | syscalls/req "
        "| answered p50 ms |",
        "|---|---|---|---|---|---|",
    ]
    for row in rows:
        j, p = row["jobrail"], row["peer"]
        lines.append(
            f"| {row['load']} | {j['cpu_ms']} / {p['cpu_ms']} | {j['system_ms']} / "
            f"{p['system_ms']} | {j['wakeups']} / {p['wakeups']} | {j['syscalls']} / "
            f"{p['syscalls']} | {j['answered_p50_ms']} / {p['answered_p50_ms']} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.api_rates")
    parser.add_argument("--rates", default="50,200,800", help="requests/s, comma-separated")
    parser.add_argument("--seconds", type=float, default=5.0, help="of each load")
    args = parser.parse_args()
    rates = [float(r) for r in args.rates.split(",")]
    print(table(asyncio.run(run(rates, args.seconds))))


if __name__ == "__main__":
    main()
