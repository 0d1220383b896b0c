"""Profile `jobrail api` under the load of bench/api_load.py (py-spy, sampling).

python -m bench.profile_api              # prints where POST /demo/echo spends its time
python -m bench.profile_api --raw out    # also keeps py-spy's raw stacks
python -m bench.profile_api --summarize out   # only summarizes stacks recorded before

Shares are of the samples in which the server's thread was busy (py-spy leaves out
idle samples), inclusive: a sample counts for every part its stack passes through.
"""

import asyncio
import re
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

from bench.api_load import echo_request, jobrail_api, load
from bench.common import leaf_file, unique
from bench.jobrail_e2e import Stack, cleanup, create_database
from jobrail.store.admin import drop_database

PY_SPY = str(Path(sys.executable).parent / "py-spy")

# (part, a pattern any frame of the stack matches: "function (file"), most specific first.
PARTS = [
    ("uvicorn's protocol (httptools_impl, http/server.py)", r"httptools_impl\.py|api/server\.py"),
    ("telemetry middleware (RequestTelemetry)", r"telemetry/http\.py"),
    ("OpenTelemetry (spans, context)", r"opentelemetry/"),
    ("Prometheus client", r"prometheus_client/"),
    ("logging", r"logging/__init__|telemetry/logging\.py"),
    ("API key check (auth)", r"api/auth\.py"),
    ("API rate limit (limits/api.py + redis)", r"limits/api\.py|api/rate_limits\.py"),
    ("Redis client", r"redis/"),
    ("request guard (size, NUL, 500s)", r"api/guard\.py|nul_guard\.py|api/errors\.py"),
    ("FastAPI dependency solving + validation", r"solve_dependencies|request_body_to_args"),
    ("pydantic", r"pydantic"),
    ("dishka", r"dishka/"),
    ("EnqueueJob (whole use case)", r"use_cases/enqueue\.py"),
    ("intake insert (PgJobIntake.add)", r"add \(jobrail/store/pg_intake\.py|telemetry/metrics\.py"),
    ("fast-path publish (OutboxPublisher._publish minus marks)", r"_publish \(.*outbox\.py"),
    ("mark published (PgOutboxMarks)", r"mark_published"),
    ("broker publish (brokers.py + aio_pika/aiormq/pamqp)", r"aio_pika/|aiormq/|pamqp/"),
    ("asyncpg", r"asyncpg/"),
    ("job message (envelope)", r"transport/codec\.py"),
    ("FastAPI routing / starlette", r"starlette/|fastapi/routing"),
    ("asyncio / uvloop loop itself", r"asyncio/|uvloop"),
]


async def record(raw: Path, seconds: int = 12, concurrency: int = 32) -> dict[str, float]:
    url = await create_database()
    stack = Stack(database_url=url, prefix=unique("bench."))
    try:
        async with jobrail_api(stack) as (server, port, key):
            command = [PY_SPY, "record", "-p", str(server.popen.pid), "-f", "raw", "-o", str(raw)]
            spy = asyncio.create_task(
                asyncio.to_thread(
                    subprocess.run,
                    [*command, "-r", "250", "-d", str(seconds)],
                    check=True,
                    capture_output=True,
                )
            )
            measured = await load(port, echo_request(key), concurrency, seconds - 2)
            await spy
            return measured
    finally:
        await cleanup(stack)
        await drop_database(url)


def summarize(raw: Path) -> str:
    inclusive: Counter[str] = Counter()
    leaves: Counter[str] = Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, count = line.rsplit(" ", 1)
        n = int(count)
        total += n
        for part, pattern in PARTS:
            if re.search(pattern, stack):
                inclusive[part] += n
        leaves[leaf_file(stack)] += n
    lines = [f"{total} busy samples", "", "inclusive share by part:"]
    lines += [f"{100 * inclusive[part] / total:5.1f}%  {part}" for part, _ in PARTS]
    lines += ["", "self time by file (top 25):"]
    lines += [f"{100 * n / total:5.1f}%  {name}" for name, n in leaves.most_common(25)]
    return "\n".join(lines)


if __name__ == "__main__":
    if "--summarize" in sys.argv:
        print(summarize(Path(sys.argv[sys.argv.index("--summarize") + 1])))
        sys.exit()
    keep = sys.argv[sys.argv.index("--raw") + 1] if "--raw" in sys.argv else None
    target = Path(keep) if keep else Path(tempfile.mkdtemp()) / "api.raw"
    print(asyncio.run(record(target)))
    print(summarize(target))
