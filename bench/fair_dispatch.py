"""Fair dispatch against plain dispatch, in one run (docs/design/fair-dispatch.md, step
2's bench). Fair: `JOBRAIL_DISPATCH__ENABLED=true`, an enqueue holds its job in
Postgres and the worker process's dispatcher releases the held jobs into RabbitMQ in
fair order between tenants, at most `ready_target` (64) ready at a time. Plain: every
enqueue publishes at once, first in first out across tenants.

1. **Throughput**: a backlog of `jobs` bench no-ops (a limit and a lock, as in
   `bench.jobrail_e2e`) across `tenants` tenants, enqueued in process, then one worker
   process drains it; jobs/s from the first claim to the last finish, and the worker's
   CPU per job (its dispatcher's included when fair), plain and fair in `rounds`
   alternating pairs (the first of each pair alternates too). The ratio fair / plain is
   the median of the pairs' ratios.
2. **Late tenant**: tenant A has a backlog of `backlog` jobs; once `running` of them have
   started, tenant B enqueues `late`. Counted, by the order of the starts (each job
   appends a line as it starts, `bench.fair_jobs`): A's starts after B's enqueue has
   committed and before B's last start, as a share of A's backlog; fair, then plain.
3. **Dispatcher cost**: `cost_jobs` held jobs across 10 and across 1,000 tenants, drained
   by a dispatcher run here, in this process (``JobDispatcher.pass_once`` as its loop
   runs it, the interval between empty passes included), while a worker process with
   dispatch off runs the jobs. Its CPU per released job is this thread's CPU time (the
   counting proxy that counts its SQL statements at the wire, `bench.wire`, runs on a
   thread of its own); alternating rounds, medians, ratio 1,000 / 10.
4. **Time to start** (request sent to handler started, both clocks this machine's) at a
   steady `rate` per second for `seconds` (after 1 s not counted), p50 and p99: jobrail
   fair (`POST /jobs` on a `jobrail api` with dispatch on), jobrail plain (another `jobrail
   api`, dispatch off, to the same worker, whose dispatcher then only idles), the
   insert-then-`.kiq()` peer (`POST /insert-kiq`, `bench.peer_app`) and a raw `.kiq()`
   from this process, both run by one Taskiq worker process; `rounds` rounds, each
   measure's order turned by one, medians of the rounds. Beside them: how long the
   requests took to answer, and the CPU per job of the worker and of the API.

A job that has not run once no other has started or ended for STALL_S is counted as
never run, and the measure goes on: with dispatch on, a released job whose message
reached the worker before its release committed is dropped by the claim and never runs
(bench/README.md, "Fair dispatch").

python -m bench.fair_dispatch [--quick] [--jobs N] [--tenants T] [--backlog A]
    [--cost-jobs N] [--rate R] [--seconds S] [--rounds K]

Writes bench/results/fair-<date>.json; `make bench` runs it too (bench.run).
"""

import argparse
import asyncio
import contextlib
import datetime
import importlib
import json
import os
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from sqlalchemy import func, select, text
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from bench import fair_jobs
from bench.api_load import jobrail_api, peer_api
from bench.common import (
    AMQP_URL,
    PYTHON,
    ROOT,
    Proc,
    consumers,
    machine,
    spawn,
    tree_cpu_s,
    unique,
    wait_until,
    write_json,
)
from bench.jobrail_e2e import Stack, cleanup, create_database
from bench.wire import CountingProxy, PostgresCounter
from jobrail.dispatch.use_cases import JobDispatcher
from jobrail.jobs.enqueue import EnqueueJob, EnqueueJobCommand
from jobrail.jobs.intake import JobCatalog
from jobrail.kernel.clock import Clock
from jobrail.kernel.ids import TenantId
from jobrail.runtime.bootstrap import Runtime, build_runtime
from jobrail.settings import Settings
from jobrail.store.admin import drop_database
from jobrail.store.dispatch import SqlaDispatchStore
from jobrail.store.tables import dispatch_queues, jobs
from jobrail.transport.codec import MessagePublisher
from jobrail.transport.topology import Topology

APP = "bench.fair_jobs:rail"
QUEUE = "jobs.default"
RESULTS = ROOT / "bench" / "results"
# How long the bench waits for a job once no other has started or ended for that long:
# then it counts the job as never run, and goes on (see "Fair dispatch" in
# bench/README.md: released jobs whose message the worker dropped).
STALL_S = 10.0


@dataclass(frozen=True)
class Sizes:
    """What one run measures (the defaults: `python -m bench.fair_dispatch`)."""

    jobs: int = 5000
    tenants: int = 10
    backlog: int = 5000
    late: int = 10
    running: int = 256
    cost_jobs: int = 5000
    cost_tenants: tuple[int, int] = (10, 1000)
    rate: float = 200.0
    seconds: float = 5.0
    rounds: int = 2

    @classmethod
    def quick(cls) -> "Sizes":
        return cls(jobs=2000, backlog=2000, cost_jobs=2000, seconds=3.0)


def step(name: str) -> None:
    print(f"... fair dispatch: {name}", file=sys.stderr, flush=True)


@dataclass
class FairStack(Stack):
    """The bench's stack (``bench.jobrail_e2e.Stack``), its processes on this module's
    app, with fair dispatch on or off, and the priorities' offsets when given."""

    dispatch: bool = False
    offsets: dict[str, float] | None = None

    def env(self, **extra: str) -> dict[str, str]:
        if self.offsets is not None:
            extra["JOBRAIL_DISPATCH__PRIORITY_OFFSETS_S"] = json.dumps(self.offsets)
        return super().env(
            JOBRAIL_APP=APP, JOBRAIL_DISPATCH__ENABLED=str(self.dispatch).lower(), **extra
        )

    def settings(self, **overrides: Any) -> Settings:
        dispatch: dict[str, Any] = {"enabled": self.dispatch}
        if self.offsets is not None:
            dispatch["priority_offsets_s"] = self.offsets
        return super().settings(dispatch=dispatch, **overrides)


async def reset(stack: Stack) -> None:
    """No jobs, messages or dispatch leases left from a measure before."""
    engine = create_async_engine(stack.database_url)
    async with engine.begin() as conn:
        await conn.execute(
            text(
                "TRUNCATE jobs, outbox, inbox, dispatch_queues, dispatch_arrivals, "
                "dispatch_gates CASCADE"
            )
        )
    await engine.dispose()


async def succeeded(engine: AsyncEngine) -> int:
    async with engine.connect() as conn:
        count = await conn.scalar(
            select(func.count()).select_from(jobs).where(jobs.c.status == "succeeded")
        )
    return int(count or 0)


def worker(stack: FairStack, name: str, **env: str) -> Proc:
    """One `jobrail worker` process (and its supervisor) on `stack`."""
    return spawn(
        [PYTHON, "-m", "jobrail.cli", "worker"],
        stack.env(JOBRAIL_WORKER__PROCESSES="1", **env),
        name,
    )


async def has_consumer(queue: str) -> bool:
    return await consumers(queue) >= 1


def work_queue(stack: Stack) -> str:
    return Topology.from_settings(stack.settings().rabbit).queues[QUEUE]


@asynccontextmanager
async def runtime_of(settings: Settings) -> AsyncIterator[Runtime]:
    """An API-side runtime (no consumer, no loops) on `settings`, its broker started."""
    runtime = build_runtime(settings, worker=False, modules=fair_jobs.rail.modules)
    await runtime.broker.startup()
    try:
        yield runtime
    finally:
        await runtime.broker.shutdown()
        await runtime.container.close()


async def enqueue_all(runtime: Runtime, commands: Sequence[EnqueueJobCommand]) -> float:
    """Enqueue `commands` through EnqueueJob, 64 at a time (held when the runtime's
    settings have dispatch on); jobs/s."""
    waiting = list(reversed(commands))

    async def client() -> None:
        while waiting:
            command = waiting.pop()
            async with runtime.container() as request:
                await (await request.get(EnqueueJob))(command)

    started = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(64)))
    return len(commands) / (time.perf_counter() - started)


def noops(count: int, tenants: int, prefix: str = "t") -> list[EnqueueJobCommand]:
    """`count` bench no-ops, the tenants taking turns."""
    return [
        EnqueueJobCommand(
            tenant_id=TenantId(f"{prefix}{n % tenants}"), type="bench.noop", payload={"n": n}
        )
        for n in range(count)
    ]


def stamps(count: int, tenant: str, path: str | None) -> list[EnqueueJobCommand]:
    return [
        EnqueueJobCommand(tenant_id=TenantId(tenant), type="bench.stamp", payload={"path": path})
        for _ in range(count)
    ]


# 1. Throughput


async def throughput(url: str, sizes: Sizes) -> dict[str, Any]:
    pairs: list[dict[str, dict[str, float]]] = []
    for n in range(sizes.rounds):
        pair: dict[str, dict[str, float]] = {}
        for fair in (False, True) if n % 2 == 0 else (True, False):
            name = "fair" if fair else "plain"
            step(f"throughput, {name} (round {n + 1})")
            pair[name] = await _drain_once(url, sizes, fair=fair)
        pairs.append(pair)
    figures: dict[str, Any] = {"jobs": sizes.jobs, "tenants": sizes.tenants, "rounds": pairs}
    for name in ("plain", "fair"):
        figures[name] = {
            k: round(statistics.median(p[name][k] for p in pairs), 3)
            for k in pairs[0][name]
            if k != "never_ran"
        }
        figures[name]["never_ran"] = sum(p[name]["never_ran"] for p in pairs)
    figures["ratio_jobs_per_s"] = _median_ratio(pairs, "jobs_per_s")
    figures["ratio_cpu_ms_per_job"] = _median_ratio(pairs, "cpu_ms_per_job")
    figures["ratio_enqueue_jobs_per_s"] = _median_ratio(pairs, "enqueue_jobs_per_s")
    return figures


def _median_ratio(pairs: list[dict[str, dict[str, float]]], figure: str) -> float:
    return round(statistics.median(p["fair"][figure] / p["plain"][figure] for p in pairs), 3)


async def _drain_once(url: str, sizes: Sizes, *, fair: bool) -> dict[str, float]:
    stack = FairStack(database_url=url, prefix=unique("bench."), dispatch=fair)
    await reset(stack)
    try:
        async with runtime_of(stack.settings()) as runtime:
            enqueued = await enqueue_all(runtime, noops(sizes.jobs, sizes.tenants))
        drained = await drain(stack, sizes.jobs, "fair" if fair else "plain")
    finally:
        await cleanup(stack)
    return {**drained, "enqueue_jobs_per_s": round(enqueued)}


async def drain(stack: FairStack, count: int, name: str) -> dict[str, float]:
    """One worker process drains the backlog of `count` jobs enqueued before it started,
    as ``bench.jobrail_e2e.drain`` measures it: jobs/s from the first claim to the last
    finish, and the worker's CPU from its consumer's start to the last success seen (a
    jobs table read every 0.1 s); `never_ran`, the jobs that had not succeeded when none
    more had for STALL_S."""
    engine = create_async_engine(stack.database_url)
    process = worker(stack, f"fair-drain-{name}")
    try:
        await wait_until(lambda: has_consumer(work_queue(stack)), 60, "the worker")
        cpu_before = cpu_after = tree_cpu_s(process.popen.pid)

        def progress() -> None:
            nonlocal cpu_after
            cpu_after = tree_cpu_s(process.popen.pid)

        never_ran = await _run_out(engine, count, progress)
        async with engine.connect() as conn:
            first, last = (
                await conn.execute(
                    select(func.min(jobs.c.started_at), func.max(jobs.c.finished_at))
                )
            ).one()
    finally:
        process.stop()
        await engine.dispose()
    ran = count - never_ran
    return {
        "jobs_per_s": round(ran / (last - first).total_seconds()),
        "cpu_ms_per_job": round(1000 * (cpu_after - cpu_before) / ran, 3),
        "never_ran": never_ran,
    }


# 2. Late tenant


async def late_tenant(url: str, sizes: Sizes) -> dict[str, Any]:
    figures: dict[str, Any] = {"backlog": sizes.backlog, "late": sizes.late}
    for fair in (True, False):
        name = "fair" if fair else "plain"
        step(f"a late tenant behind a backlog of {sizes.backlog:,}, {name}")
        figures[name] = await _late_once(url, sizes, fair=fair)
    return figures


async def _late_once(url: str, sizes: Sizes, *, fair: bool) -> dict[str, Any]:
    stack = FairStack(database_url=url, prefix=unique("bench."), dispatch=fair)
    await reset(stack)
    path = str(Path(tempfile.mkdtemp(prefix="jobrail-fair-")) / "starts")
    process: Proc | None = None
    try:
        async with runtime_of(stack.settings()) as runtime:
            await enqueue_all(runtime, stamps(sizes.backlog, "a", path))
            process = worker(stack, f"fair-late-{'fair' if fair else 'plain'}")
            await wait_until(
                _starts_at_least(path, sizes.running), 300, "A's jobs to start", interval=0.01
            )
            sent = time.time()
            await enqueue_all(runtime, stamps(sizes.late, "b", path))
            a_before = len(fair_jobs.tenants_in_order(path))  # B's jobs are committed

            async def all_of_b() -> bool:
                return fair_jobs.tenants_in_order(path).count("b") == sizes.late

            with contextlib.suppress(TimeoutError):  # counted below: B's never started
                await wait_until(all_of_b, STALL_S + 60, "B's jobs to start", interval=0.05)
    finally:
        if process is not None:
            process.stop()
        await cleanup(stack)
    order = fair_jobs.tenants_in_order(path)
    last_b = max((n for n, tenant in enumerate(order) if tenant == "b"), default=len(order))
    a_meanwhile = order[a_before:last_b].count("a")
    return {
        "a_started_before_b": a_before,
        "a_started_meanwhile": a_meanwhile,
        "share_of_backlog_pct": round(100 * a_meanwhile / sizes.backlog, 2),
        "b_last_start_s": round(fair_jobs.starts(path)[last_b][1] - sent, 3)
        if last_b < len(order)
        else None,
        "b_never_started": sizes.late - order.count("b"),
    }


def _starts_at_least(path: str, count: int) -> Callable[[], Awaitable[bool]]:
    async def reached() -> bool:
        return len(fair_jobs.tenants_in_order(path)) >= count

    return reached


# 3. Dispatcher cost


class ThreadedProxy:
    """A counting proxy (``bench.wire``) serving on an event loop of its own thread, so
    that what it does is no part of the measured thread's CPU time."""

    def __init__(self, target_port: int) -> None:
        self.counter = PostgresCounter()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self._proxy = self._call(CountingProxy(target_port, self.counter).start())
        self.port = self._proxy.port

    def _call(self, work: Awaitable[Any]) -> Any:
        async def run() -> Any:
            return await work

        return asyncio.run_coroutine_threadsafe(run(), self._loop).result(timeout=30)

    def counts(self) -> Counter[str]:
        """A copy of the counts so far, taken on the proxy's thread."""

        async def copy() -> Counter[str]:
            return Counter(self.counter.counts)

        return self._call(copy())  # type: ignore[no-any-return]

    def close(self) -> None:
        self._call(self._proxy.stop())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)


async def dispatcher_cost(url: str, sizes: Sizes) -> dict[str, Any]:
    stack = FairStack(database_url=url, prefix=unique("bench."), dispatch=True)
    await reset(stack)
    proxy = ThreadedProxy(5432)
    engine = create_async_engine(url)
    # The worker's own dispatcher is off, and then looks for held jobs once an hour: the
    # jobs are this process's dispatcher's to release.
    consumer = worker(
        replace(stack, dispatch=False), "fair-cost-worker", JOBRAIL_DISPATCH__REDISCOVER_S="3600"
    )
    counted = stack.settings(database={"url": url.replace(":5432/", f":{proxy.port}/")})
    rounds: list[dict[str, Any]] = []
    try:
        await wait_until(lambda: has_consumer(work_queue(stack)), 60, "the worker")
        async with runtime_of(stack.settings()) as enqueuer, runtime_of(counted) as dispatching:
            holder = f"bench-{uuid.uuid4().hex[:8]}"
            await _take_lease(dispatching, holder, engine)
            first, other = sizes.cost_tenants
            for n in range(sizes.rounds):
                for tenants in (first, other) if n % 2 == 0 else (other, first):
                    step(f"dispatcher cost, {tenants:,} tenants (round {n + 1})")
                    await _clear_jobs(engine)
                    await enqueue_all(enqueuer, noops(sizes.cost_jobs, tenants, f"r{n}t"))
                    measured = await _release_all(dispatching, holder, proxy, sizes.cost_jobs)
                    never_ran = await _run_out(engine, sizes.cost_jobs)
                    rounds.append({"tenants": tenants, **measured, "never_ran": never_ran})
    finally:
        consumer.stop()
        await engine.dispose()
        proxy.close()
        await cleanup(stack)
    figures: dict[str, Any] = {
        "jobs": sizes.cost_jobs,
        "rounds": rounds,
        "never_ran": sum(r["never_ran"] for r in rounds),
    }
    for tenants in sizes.cost_tenants:
        mine = [r for r in rounds if r["tenants"] == tenants]
        figures[str(tenants)] = {
            k: round(statistics.median(r[k] for r in mine), 4)
            for k in mine[0]
            if k not in ("tenants", "never_ran")
        }
    few, many = (figures[str(t)] for t in sizes.cost_tenants)
    for k in ("cpu_ms_per_job", "statements_per_job", "round_trips_per_job"):
        figures[f"ratio_{k}"] = round(many[k] / few[k], 3)
    return figures


async def _run_out(
    engine: AsyncEngine, count: int, progress: Callable[[], None] = lambda: None
) -> int:
    """Wait until `count` jobs have succeeded, or none more has for STALL_S: how many
    never did. `progress` is called each time more have."""
    done, moved = -1, time.monotonic()
    while True:
        now = await succeeded(engine)
        if now != done:
            done, moved = now, time.monotonic()
            progress()
        if now >= count:
            return 0
        if time.monotonic() - moved > STALL_S:
            return count - now
        await asyncio.sleep(0.1)


async def _dispatcher(runtime: Runtime, holder: str) -> JobDispatcher:
    """A dispatcher made as ``jobrail.dispatch.ioc`` makes one, but named `holder`: a new
    one each round starts from nothing (as after a takeover), and the same holder keeps
    the queue's lease."""
    container, broker, settings = runtime.container, runtime.job_broker, runtime.settings
    return JobDispatcher(
        SqlaDispatchStore(await container.get(AsyncEngine)),
        broker,
        MessagePublisher(broker),
        await container.get(JobCatalog),
        await container.get(Clock),
        settings.dispatch,
        settings.rabbit.queues,
        holder,
    )


async def _take_lease(runtime: Runtime, holder: str, engine: AsyncEngine) -> None:
    """Pass until `holder` holds the queue's lease (the worker's dispatcher took it as
    it started, for `lease_s`)."""
    dispatcher = await _dispatcher(runtime, holder)

    async def held() -> bool:
        await dispatcher.pass_once(QUEUE)
        async with engine.connect() as conn:
            found = await conn.scalar(
                select(dispatch_queues.c.holder).where(dispatch_queues.c.queue == QUEUE)
            )
        return found == holder

    await wait_until(held, 60, "the dispatch lease", interval=0.2)


async def _clear_jobs(engine: AsyncEngine) -> None:
    """No jobs, and no fast-path credit (a dispatcher's idle pass gave the queue some):
    the round's enqueues are all held, for this process's dispatcher to release."""
    async with engine.begin() as conn:
        await conn.execute(
            text("TRUNCATE jobs, outbox, inbox, dispatch_arrivals, dispatch_gates CASCADE")
        )


async def _release_all(
    runtime: Runtime, holder: str, proxy: ThreadedProxy, count: int
) -> dict[str, float]:
    """Pass over the queue, as ``JobDispatcher.run_forever`` does, until `count` jobs are
    released: this thread's CPU and the SQL statements, per released job."""
    dispatcher = await _dispatcher(runtime, holder)
    idle = runtime.settings.dispatch.interval_s
    before = proxy.counts()
    cpu_before = time.thread_time()
    started = time.perf_counter()
    released = passes = empty = 0
    while released < count:
        got = await dispatcher.pass_once(QUEUE)
        released += got
        passes += 1
        if not got:
            empty += 1
            await asyncio.sleep(idle)
    elapsed = time.perf_counter() - started
    cpu = time.thread_time() - cpu_before
    counts = proxy.counts()
    counts.subtract(before)
    return {
        "cpu_ms_per_job": round(1000 * cpu / released, 4),
        "statements_per_job": round(counts["statements"] / released, 4),
        "round_trips_per_job": round(counts["round_trips"] / released, 4),
        "passes": passes,
        "empty_passes": empty,
        "jobs_per_pass": round(released / passes, 1),
        "cpu_ms_per_pass": round(1000 * cpu / passes, 3),
        "released_per_s": round(released / elapsed),
    }


# 4. Time to start


class Connections:
    """Keep-alive HTTP/1.1 connections to one server, each used by one request at a
    time (as ``bench.api_load``'s load generator, lean so that it times the server). A
    connection that failed is dropped; `close` drops them all (a server closes those
    idle for a few seconds: each measure starts with new ones)."""

    def __init__(self, port: int, size: int = 32) -> None:
        self._port = port
        self._size = size
        self._free: asyncio.Queue[tuple[asyncio.StreamReader, asyncio.StreamWriter]]
        self._opened: list[asyncio.StreamWriter]
        self.close()

    async def post(self, path: str, body: bytes, key: str = "") -> dict[str, Any]:
        """The JSON answer of a POST that must answer 202."""
        if self._free.empty() and len(self._opened) < self._size:
            reader, writer = await asyncio.open_connection("127.0.0.1", self._port)
            self._opened.append(writer)
        else:
            reader, writer = await self._free.get()
        answered = False
        try:
            head = (
                f"POST {path} HTTP/1.1\r\nHost: bench\r\nAuthorization: Bearer {key}\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
            )
            writer.write(head.encode() + body)
            answer = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in answer.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":", 1)[1])
            payload = await reader.readexactly(length)
            answered = True
        finally:
            if answered:
                self._free.put_nowait((reader, writer))
            else:
                writer.close()
                self._opened.remove(writer)
        if answer[9:12] != b"202":
            raise RuntimeError(f"{path}: {answer[:12]!r} {payload[:200]!r}")
        return json.loads(payload)  # type: ignore[no-any-return]

    def close(self) -> None:
        for writer in getattr(self, "_opened", ()):
            writer.close()
        self._free = asyncio.Queue()
        self._opened = []


Send = Callable[[], Awaitable[str]]  # sends one job, returns its id


async def paced(send: Send, rate: float, seconds: float, warm_up_s: float = 1.0) -> dict[str, Any]:
    """`send` at `rate` a second, each on time whatever the ones before wait for (an open
    loop), for `warm_up_s` not counted and then `seconds`: the counted jobs' ids and the
    times they were sent at (``time.time()``), how long their requests took to answer,
    the errors, and how many were sent in all."""
    loop = asyncio.get_running_loop()
    sent: dict[str, float] = {}
    answered: list[float] = []
    errors: list[str] = []
    warm = int(warm_up_s * rate)

    async def one(counted: bool) -> None:
        at = time.time()
        try:
            job_id = await send()
        except Exception as exc:  # a failed request is counted, not fatal
            errors.append(repr(exc))
            return
        if counted:
            sent[job_id] = at
            answered.append(time.time() - at)

    tasks: list[asyncio.Task[None]] = []
    begin = loop.time()
    for n in range(warm + int(seconds * rate)):
        delay = begin + n / rate - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one(n >= warm)))
    await asyncio.gather(*tasks)
    return {
        "sent": sent,
        "answered_p50_ms": round(1000 * statistics.median(answered), 2) if answered else None,
        "errors": errors,
        "total": len(tasks) - len(errors),
    }


async def _latencies(path: str, sent: dict[str, float], timeout: float = STALL_S) -> dict[str, Any]:
    """Sent to started, for each job of `sent`, once all of them have started."""

    async def all_started() -> dict[str, float] | None:
        started = dict(fair_jobs.starts(path))
        return started if sent.keys() <= started.keys() else None

    try:
        started = await wait_until(all_started, timeout, "the jobs to start", interval=0.1)
    except TimeoutError:
        started = dict(fair_jobs.starts(path))
    ms = sorted(1000 * (started[j] - at) for j, at in sent.items() if j in started)
    return {
        "jobs": len(sent),
        "never_started": len(sent) - len(ms),
        "p50_ms": round(statistics.median(ms), 2) if ms else None,
        "p99_ms": round(ms[int(len(ms) * 0.99)], 2) if ms else None,
        "max_ms": round(ms[-1], 2) if ms else None,
    }


MEASURES = ("jobrail_fair", "jobrail_plain", "peer_insert_kiq", "raw_kiq")


@dataclass
class Measure:
    """How one time-to-start measure sends a job, where its starts are written, who runs
    its jobs and who answers its requests (none for a `.kiq()` from here)."""

    send: Send
    starts: str
    runner: Proc
    server: Proc | None = None
    connections: Connections | None = None

    async def once(self, rate: float, seconds: float) -> dict[str, Any]:
        """A load at `rate`: the times to start, and the CPU per job of the processes."""
        before = self._cpu()
        sent = await paced(self.send, rate, seconds)
        after = self._cpu()
        if self.connections is not None:
            self.connections.close()
        per_job = [
            round(1000 * (b - a) / max(sent["total"], 1), 3)
            for a, b in zip(before, after, strict=True)
        ]
        return {
            **await _latencies(self.starts, sent["sent"]),
            "answered_p50_ms": sent["answered_p50_ms"],
            "errors": len(sent["errors"]),
            # Over the load (in steady state: what they ran while it was sent).
            "worker_cpu_ms_per_job": per_job[0],
            "server_cpu_ms_per_job": per_job[1] if self.server else None,
        }

    def _cpu(self) -> list[float]:
        """CPU seconds so far of the runner's and the server's processes."""
        return [tree_cpu_s(p.popen.pid) if p else 0.0 for p in (self.runner, self.server)]


async def time_to_start(url: str, sizes: Sizes) -> dict[str, Any]:
    fair = FairStack(database_url=url, prefix=unique("bench."), dispatch=True)
    await reset(fair)
    where = Path(tempfile.mkdtemp(prefix="jobrail-fair-"))
    paths = {name: str(where / name) for name in ("jobrail_fair", "jobrail_plain", "peer")}
    peer_queue = unique("bench.peer.")
    jobrail_worker = worker(fair, "fair-start-worker")
    taskiq_worker = peer_worker(peer_queue, paths["peer"])
    rounds: list[dict[str, Any]] = []
    try:
        async with (
            jobrail_api(fair, "fair") as (fair_api, fair_port, fair_key),
            jobrail_api(replace(fair, dispatch=False), "plain") as (plain_api, plain_port, key),
            peer_api(url, peer_queue) as (peer, peer_port),
            _raw_kiq(peer_queue) as kiq,
        ):
            await wait_until(lambda: has_consumer(work_queue(fair)), 60, "the jobrail worker")
            await wait_until(lambda: has_consumer(peer_queue), 60, "the peer's worker")
            to_fair, to_plain, to_peer = (
                Connections(p) for p in (fair_port, plain_port, peer_port)
            )
            measures = {
                "jobrail_fair": Measure(
                    _stamp(to_fair, fair_key, paths["jobrail_fair"]),
                    paths["jobrail_fair"],
                    jobrail_worker,
                    fair_api,
                    to_fair,
                ),
                "jobrail_plain": Measure(
                    _stamp(to_plain, key, paths["jobrail_plain"]),
                    paths["jobrail_plain"],
                    jobrail_worker,
                    plain_api,
                    to_plain,
                ),
                "peer_insert_kiq": Measure(
                    _insert_kiq(to_peer), paths["peer"], taskiq_worker, peer, to_peer
                ),
                "raw_kiq": Measure(kiq, paths["peer"], taskiq_worker),
            }
            for n in range(sizes.rounds):
                rounds.append({})
                for name in MEASURES[n % len(MEASURES) :] + MEASURES[: n % len(MEASURES)]:
                    step(f"time to start at {sizes.rate:g}/s, {name} (round {n + 1})")
                    rounds[-1][name] = await measures[name].once(sizes.rate, sizes.seconds)
    finally:
        jobrail_worker.stop()
        taskiq_worker.stop()
        await cleanup(fair)
    figures: dict[str, Any] = {"rate": sizes.rate, "seconds": sizes.seconds, "rounds": rounds}
    medians = (
        *("p50_ms", "p99_ms", "max_ms", "answered_p50_ms"),
        *("worker_cpu_ms_per_job", "server_cpu_ms_per_job"),
    )
    for name in MEASURES:
        figures[name] = {k: _median(r[name][k] for r in rounds) for k in medians} | {
            k: sum(r[name][k] for r in rounds) for k in ("jobs", "never_started", "errors")
        }
    return figures


def peer_worker(queue: str, starts: str) -> Proc:
    """One Taskiq worker process (Taskiq's defaults otherwise) running the peer's task
    from `queue`, noting each start in `starts`."""
    argv = ["taskiq", "worker", "bench.peer_app:broker", "--workers", "1"]
    return spawn(
        [PYTHON, "-m", *argv, "--no-configure-logging"],
        {"BENCH_QUEUE": queue, "BENCH_AMQP_URL": AMQP_URL, "BENCH_STARTS": starts},
        "fair-start-peer-worker",
    )


def _median(values: Any) -> float | None:
    present = [v for v in values if v is not None]
    return round(statistics.median(present), 2) if present else None


def _stamp(server: Connections, key: str, path: str) -> Send:
    body = json.dumps({"type": "bench.stamp", "payload": {"path": path}}).encode()

    async def send() -> str:
        return str((await server.post("/jobs", body, key))["job_id"])

    return send


def _insert_kiq(server: Connections) -> Send:
    async def send() -> str:
        return str((await server.post("/insert-kiq", b'{"message": "bench"}'))["job_id"])

    return send


@asynccontextmanager
async def _raw_kiq(queue: str) -> AsyncIterator[Send]:
    """`.kiq()` of the peer's task, from this process, to `queue`."""
    before = os.environ.get("BENCH_QUEUE")
    os.environ["BENCH_QUEUE"] = queue  # read at import: the peer's broker, on `queue`
    from bench import peer_app

    peer = importlib.reload(peer_app)
    if before is None:
        del os.environ["BENCH_QUEUE"]
    else:
        os.environ["BENCH_QUEUE"] = before
    await peer.broker.startup()

    async def send() -> str:
        job_id = uuid.uuid4().hex
        await peer.echo.kiq(job_id)
        return job_id

    try:
        yield send
    finally:
        await peer.broker.shutdown()


# The run


async def idle_cost(url: str, seconds: float = 10.0) -> dict[str, Any]:
    """A worker process with nothing to do: its CPU (% of a core) with dispatch off and
    on, each measured over `seconds` once it has run 3 s."""
    figures: dict[str, Any] = {"seconds": seconds}
    for name, dispatch in (("plain", False), ("fair", True)):
        stack = FairStack(database_url=url, prefix=unique("bench."), dispatch=dispatch)
        await reset(stack)
        idle = worker(stack, f"idle-{name}-worker")
        try:
            queue = work_queue(stack)
            await wait_until(lambda: has_consumer(queue), 60, "the idle worker")  # noqa: B023
            await asyncio.sleep(3)
            before, began = tree_cpu_s(idle.popen.pid), time.monotonic()
            await asyncio.sleep(seconds)
            used = tree_cpu_s(idle.popen.pid) - before
            figures[name] = {"cpu_pct": round(100 * used / (time.monotonic() - began), 1)}
        finally:
            idle.stop()
            await cleanup(stack)
    return figures


async def run(sizes: Sizes | None = None) -> dict[str, Any]:
    """All five measures on one database of their own; what `bench.run` reports."""
    sizes = sizes or Sizes()
    url = await create_database()
    try:
        return {
            "idle": await idle_cost(url),
            "throughput": await throughput(url, sizes),
            "late_tenant": await late_tenant(url, sizes),
            "dispatcher_cost": await dispatcher_cost(url, sizes),
            "time_to_start": await time_to_start(url, sizes),
        }
    finally:
        await drop_database(url)


def ratios(r: dict[str, Any]) -> dict[str, float | None]:
    """The run's ratios, as `bench.run` keeps them."""
    t, late, cost = r["throughput"], r["late_tenant"], r["dispatcher_cost"]
    start = r["time_to_start"]
    return {
        "idle_worker_cpu_pct_fair": r["idle"]["fair"]["cpu_pct"],
        "idle_worker_cpu_pct_plain": r["idle"]["plain"]["cpu_pct"],
        "fair_vs_plain_jobs_per_s": t["ratio_jobs_per_s"],
        "fair_vs_plain_worker_cpu_per_job": t["ratio_cpu_ms_per_job"],
        "late_tenant_share_fair_pct": late["fair"]["share_of_backlog_pct"],
        "late_tenant_share_plain_pct": late["plain"]["share_of_backlog_pct"],
        "dispatcher_cpu_1000_vs_10_tenants": cost["ratio_cpu_ms_per_job"],
        "dispatcher_statements_1000_vs_10_tenants": cost["ratio_statements_per_job"],
        **{
            f"time_to_start_{p}_fair_vs_insert_kiq_peer": _ratio(
                start["jobrail_fair"][p], start["peer_insert_kiq"][p]
            )
            for p in ("p50_ms", "p99_ms")
        },
    }


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 2) if a is not None and b else None


def rows(r: dict[str, Any]) -> list[tuple[str, str]]:
    """The run's lines of the results table (bench/README.md)."""
    t, late, cost, start = (
        r["throughput"],
        r["late_tenant"],
        r["dispatcher_cost"],
        r["time_to_start"],
    )
    few, many = (k for k in cost if k.isdigit())
    idle = r["idle"]
    lines = [
        (
            "an idle worker process's CPU, fair / plain dispatch",
            f"{idle['fair']['cpu_pct']} / {idle['plain']['cpu_pct']} % of a core",
        ),
        (
            f"fair / plain dispatch, {t['jobs']:,} jobs of {t['tenants']} tenants, 1 worker",
            f"{t['fair']['jobs_per_s']:.0f} / {t['plain']['jobs_per_s']:.0f} jobs/s "
            f"({t['ratio_jobs_per_s']}x, target >= 0.9)" + _never_ran(t),
        ),
        (
            "worker CPU per job (its dispatcher's included), fair / plain",
            f"{t['fair']['cpu_ms_per_job']} / {t['plain']['cpu_ms_per_job']} ms "
            f"({t['ratio_cpu_ms_per_job']}x)",
        ),
        (
            f"late tenant: A's starts after B's {late['late']} enqueued, before B's last "
            f"(of {late['backlog']:,}), fair / plain",
            " / ".join(_late(late[name]) for name in ("fair", "plain")) + " (target < 2 %)",
        ),
        (
            f"dispatcher CPU per released job, {int(few):,} / {int(many):,} tenants",
            f"{cost[few]['cpu_ms_per_job']} / {cost[many]['cpu_ms_per_job']} ms "
            f"({cost['ratio_cpu_ms_per_job']}x, target <= 1.5)"
            + (f", {cost['never_ran']} released jobs never ran" if cost.get("never_ran") else ""),
        ),
        (
            f"dispatcher SQL statements per released job, {int(few):,} / {int(many):,} tenants",
            f"{cost[few]['statements_per_job']} / {cost[many]['statements_per_job']} "
            f"({cost['ratio_statements_per_job']}x, target <= 1.5; "
            f"{cost[few]['jobs_per_pass']} / {cost[many]['jobs_per_pass']} jobs a pass)",
        ),
    ]
    names = {
        "jobrail_fair": "jobrail, fair (POST /jobs)",
        "jobrail_plain": "jobrail, plain (POST /jobs)",
        "peer_insert_kiq": "insert-then-.kiq() peer",
        "raw_kiq": "raw .kiq()",
    }
    for name, label in names.items():
        m = start[name]
        lost = f", {m['never_started']} of {m['jobs']} never started" if m["never_started"] else ""
        errors = f", {m['errors']} errors" if m["errors"] else ""
        lines.append(
            (
                f"time to start at {start['rate']:g}/s, p50 / p99: {label}",
                f"{m['p50_ms']} / {m['p99_ms']} ms (answered p50 {m['answered_p50_ms']} ms; "
                f"CPU a job: worker {m['worker_cpu_ms_per_job']} ms"
                + (f", API {m['server_cpu_ms_per_job']} ms" if m["server_cpu_ms_per_job"] else "")
                + f"){lost}{errors}",
            )
        )
    return lines


def _never_ran(t: dict[str, Any]) -> str:
    lost = {name: t[name]["never_ran"] for name in ("fair", "plain") if t[name].get("never_ran")}
    of = t["jobs"] * len(t["rounds"])
    return "".join(f"; {name}: {n} of {of:,} never ran" for name, n in lost.items())


def _late(m: dict[str, Any]) -> str:
    lost = m.get("b_never_started")
    return f"{m['a_started_meanwhile']} ({m['share_of_backlog_pct']} %)" + (
        f" [{lost} of B's never started]" if lost else ""
    )


def arguments(argv: list[str] | None = None) -> Sizes:
    defaults = Sizes()
    parser = argparse.ArgumentParser(
        prog="python -m bench.fair_dispatch",
        description="Fair dispatch against plain in one run (about 5 minutes; bench/README.md).",
    )
    parser.add_argument("--quick", action="store_true", help="smaller backlogs, shorter loads")
    parser.add_argument("--jobs", type=int, help=f"throughput backlog ({defaults.jobs})")
    parser.add_argument("--tenants", type=int, help=f"its tenants ({defaults.tenants})")
    parser.add_argument("--backlog", type=int, help=f"A's backlog ({defaults.backlog})")
    parser.add_argument("--cost-jobs", type=int, help=f"held jobs a round ({defaults.cost_jobs})")
    parser.add_argument("--rate", type=float, help=f"jobs/s to time starts at ({defaults.rate:g})")
    parser.add_argument("--seconds", type=float, help=f"of each load ({defaults.seconds:g})")
    parser.add_argument("--rounds", type=int, help=f"alternating rounds ({defaults.rounds})")
    args = parser.parse_args(argv)
    sizes = Sizes.quick() if args.quick else defaults
    given = {
        name: value
        for name in ("jobs", "tenants", "backlog", "cost_jobs", "rate", "seconds", "rounds")
        if (value := getattr(args, name)) is not None
    }
    if given.get("rounds", 1) < 1:
        parser.error("--rounds must be at least 1")
    return replace(sizes, **given)


def main() -> None:
    from bench.run import render

    sizes = arguments()
    started = time.time()
    results: dict[str, Any] = {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "sizes": asdict(sizes),
        **asyncio.run(run(sizes)),
    }
    results["ratios"] = ratios(results)
    results["seconds"] = round(time.time() - started)
    write_json(RESULTS / f"fair-{results['date'][:19].replace(':', '')}.json", results)
    print("\n".join(render(rows(results))), flush=True)
    print(json.dumps(results["ratios"]), f"({results['seconds']}s)", file=sys.stderr)


if __name__ == "__main__":
    main()
