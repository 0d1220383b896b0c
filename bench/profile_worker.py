"""Profile a jobrail worker while it drains a pre-loaded queue (py-spy, sampling).

python -m bench.profile_worker            # prints the hottest places
python -m bench.profile_worker --raw out  # also keeps py-spy's raw stacks
"""

import asyncio
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

import psutil

from bench.common import PYTHON, consumers, leaf_file, spawn, unique, wait_until
from bench.jobrail_e2e import Stack, cleanup, create_database, enqueue
from jobrail.store.admin import drop_database
from jobrail.transport.topology import Topology

PY_SPY = str(Path(sys.executable).parent / "py-spy")


async def record(raw: Path, jobs: int = 6000, seconds: int = 10) -> None:
    url = await create_database()
    stack = Stack(database_url=url, prefix=unique("bench."))
    try:
        await enqueue(stack, jobs)
        topology = Topology.from_settings(stack.settings().rabbit)
        worker = spawn([PYTHON, "-m", "jobrail.cli", "worker"], stack.env(), "profile")
        try:
            await wait_until(lambda: consumers(topology.queues["jobs.default"]), 60, "worker")
            child = psutil.Process(worker.popen.pid).children(recursive=True)[0].pid
            command = [PY_SPY, "record", "-p", str(child), "-f", "raw", "-o", str(raw)]
            await asyncio.to_thread(
                subprocess.run, [*command, "-r", "200", "-d", str(seconds)], check=True
            )
        finally:
            worker.stop()
    finally:
        await cleanup(stack)
        await drop_database(url)


def summarize(raw: Path) -> str:
    by_file: Counter[str] = Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, count = line.rsplit(" ", 1)
        if "start_listen" not in stack:
            continue  # idle threads
        total += int(count)
        by_file[leaf_file(stack)] += int(count)
    return "\n".join(f"{100 * n / total:5.1f}%  {name}" for name, n in by_file.most_common(25))


if __name__ == "__main__":
    keep = sys.argv[sys.argv.index("--raw") + 1] if "--raw" in sys.argv else None
    target = Path(keep) if keep else Path(tempfile.mkdtemp()) / "worker.raw"
    asyncio.run(record(target))
    print(summarize(target))
