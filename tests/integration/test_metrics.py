"""Prometheus metrics of the API and of real worker processes, as jobs run through the
real Postgres, RabbitMQ and Redis."""

import asyncio
import json
import os
import signal
import socket
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from jobrail.cli.schema import migrate
from jobrail.jobs.enqueue import EnqueueJob, EnqueueJobCommand
from jobrail.kernel.ids import TenantId
from jobrail.runtime.app import create_app, runtime_of
from jobrail.settings import Settings
from jobrail.store.tables import jobs as jobs_table
from tests.support.apps import test_jobs
from tests.support.fixtures import ApiClient, settings_from
from tests.support.recorder import Recorder
from tests.support.servers import free_port
from tests.support.services import wait_for

TEST_APP = "tests.support.apps:test_jobs"

# Every series the platform promises, by family name (counters without `_total`).
FAMILIES = {
    "jobrail_jobs_enqueued",
    "jobrail_jobs_succeeded",
    "jobrail_jobs_failed",
    "jobrail_jobs_retried",
    "jobrail_job_runtime_seconds",
    "jobrail_job_time_to_start_seconds",
    "jobrail_job_time_to_complete_seconds",
    "jobrail_queue_depth",
    "jobrail_dlq_depth",
    "jobrail_outbox_lag_seconds",
    "jobrail_limit_admitted",
    "jobrail_limit_deferred",
    "jobrail_lock_contention",
    "jobrail_lock_lost",
    "jobrail_api_rate_limited",
    "jobrail_workers",
}
LABEL_NAMES = {"job_type", "queue", "outcome", "le", "state"}
# The API's HTTP series, then prometheus_client's GC and platform series.
LABEL_NAMES |= {"method", "route", "status", "status_class"}
LABEL_NAMES |= {"generation", "implementation", "major", "minor", "patchlevel", "version"}


@dataclass(frozen=True)
class Scrape:
    """One or more scrapes of the text format, samples added up across processes."""

    families: list[set[str]]
    samples: list[tuple[str, dict[str, str], float]]

    @classmethod
    def parse(cls, *texts: str) -> "Scrape":
        families, samples = [], []
        for text in texts:
            names = set()
            for family in text_string_to_metric_families(text):
                names.add(family.name)
                samples.extend((s.name, s.labels, s.value) for s in family.samples)
            families.append(names)
        return cls(families, samples)

    def value(self, name: str, **labels: str) -> float:
        """The sum of the samples named `name` whose labels include `labels`."""
        return sum(
            value
            for sample, sample_labels, value in self.samples
            if sample == name and labels.items() <= sample_labels.items()
        )

    def has(self, name: str, **labels: str) -> bool:
        return any(
            sample == name and labels.items() <= sample_labels.items()
            for sample, sample_labels, _ in self.samples
        )

    def label_values(self) -> set[str]:
        return {value for _, labels, _ in self.samples for value in labels.values()}

    def label_names(self) -> set[str]:
        return {name for _, labels, _ in self.samples for name in labels}


def _port_is_free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_ports(count: int) -> int:
    """A base port with the `count - 1` ports after it free too."""
    for _ in range(100):
        base = free_port()
        if base + count <= 65536 and all(_port_is_free(base + i) for i in range(1, count)):
            return base
    raise AssertionError(f"no {count} free ports in a row")


@pytest.fixture
def metrics_env(stack_env: dict[str, str]) -> dict[str, str]:
    return {
        **stack_env,
        "JOBRAIL_APP": TEST_APP,
        "JOBRAIL_METRICS__LOOKUP_TTL_S": "0.2",
        # The third enqueue through the API in a minute is refused.
        "JOBRAIL_API_LIMITS__ENQUEUE": json.dumps(
            [{"scope": "tenant", "limit": 2, "window_s": 60}]
        ),
        # test.vendor_call: one call, then one every half second.
        "JOBRAIL_TEST_RATE": "2",
        "JOBRAIL_TEST_BURST": "1",
    }


@pytest.fixture
def worker_env(metrics_env: dict[str, str]) -> dict[str, str]:
    return metrics_env


@pytest.fixture
async def metrics_api(
    metrics_env: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
    make_api: Callable[..., Any],
    rabbit: Any,
) -> AsyncIterator[ApiClient]:
    async with make_api(settings_from(metrics_env, monkeypatch), test_jobs.modules) as api:
        yield api


@pytest.fixture
def recorder() -> Iterator[Recorder]:
    with Recorder() as running:
        yield running


async def _scrape_api(api: ApiClient) -> Scrape:
    response = await api.get("/metrics")
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain")
    return Scrape.parse(response.text)


async def _scrape_workers(urls: list[str]) -> Scrape:
    async with httpx.AsyncClient(timeout=10) as client:
        texts = []
        for url in urls:
            response = await client.get(url)
            assert response.status_code == 200, response.text
            texts.append(response.text)
    return Scrape.parse(*texts)


async def _workers_answer(urls: list[str]) -> Scrape | None:
    try:
        return await _scrape_workers(urls)
    except httpx.TransportError:
        return None


async def _enqueue_with_key(api: ApiClient, key: str) -> str:
    """Enqueue through the use case with an Idempotency-Key (no API rate limit)."""
    async with runtime_of(api.app).container() as request:
        enqueue = await request.get(EnqueueJob)
        result = await enqueue(
            EnqueueJobCommand(
                tenant_id=TenantId(api.tenant_id),
                type="demo.echo",
                payload={"message": key},
                idempotency_key=key,
            )
        )
    return str(result.job.id)


async def _all_finished(engine: AsyncEngine, ids: list[str]) -> bool:
    async with engine.connect() as conn:
        statuses = (
            await conn.scalars(
                select(jobs_table.c.status).where(jobs_table.c.id.in_([uuid.UUID(i) for i in ids]))
            )
        ).all()
    return len(statuses) == len(ids) and set(statuses) <= {"succeeded", "failed"}


async def test_metrics_of_the_api_and_of_every_worker_process_move_as_jobs_run(
    metrics_api: ApiClient,
    workers: Callable[..., Any],
    recorder: Recorder,
    engine: AsyncEngine,
) -> None:
    api = metrics_api
    # Two worker processes under one `jobrail worker`: ports base and base + 1.
    base = free_ports(2)
    await workers("worker", JOBRAIL_METRICS__WORKER_PORT=str(base), JOBRAIL_WORKER__PROCESSES="2")
    worker_urls = [f"http://127.0.0.1:{base + i}/metrics" for i in range(2)]
    api_before = await _scrape_api(api)
    workers_before = await wait_for(
        lambda: _workers_answer(worker_urls), timeout=30, what="both worker processes' metrics"
    )

    succeeding = [await api.enqueue("demo.echo", {"message": f"ok {n}"}) for n in range(3)]
    failing = await api.enqueue("demo.echo", {"message": "no", "permanent": True})
    retried = await api.enqueue("demo.echo", {"message": "again", "fail_times": 1})
    vendor = [
        await api.enqueue("test.vendor_call", {"url": recorder.url, "n": n}) for n in range(2)
    ]
    exclusive = [
        await api.enqueue(
            "test.exclusive", {"url": recorder.url, "resource": "r1", "n": n, "hold_ms": 500}
        )
        for n in range(2)
    ]
    posted = [await api.echo(message=f"posted {n}") for n in range(2)]
    refused = await api.post("/demo/echo", json={"message": "one too many"})
    assert refused.status_code == 429
    once, replayed = [await _enqueue_with_key(api, "once") for _ in range(2)]
    assert once == replayed
    ids = [*succeeding, failing, retried, *vendor, *exclusive, *posted, once]
    await wait_for(lambda: _all_finished(engine, ids), timeout=60, interval=0.2, what="all jobs")

    def moved(after: Scrape, name: str, **labels: str) -> float:
        return after.value(name, **labels) - workers_before.value(name, **labels)

    async def workers_recorded_everything() -> Scrape | None:
        after = await _scrape_workers(worker_urls)
        done = moved(after, "jobrail_job_runtime_seconds_count")
        return after if done >= len(ids) + 1 else None  # one retry: one attempt more

    workers_after = await wait_for(
        workers_recorded_everything, timeout=10, what="the workers' metrics to catch up"
    )

    async def dead_letter_counted() -> Scrape | None:
        after = await _scrape_api(api)
        return after if after.value("jobrail_dlq_depth") == 1 else None

    api_after = await wait_for(dead_letter_counted, timeout=10, what="the dead letter")

    # Every series is declared by the API and by each worker process.
    for names in [*api_after.families, *workers_after.families]:
        assert names >= FAMILIES, FAMILIES - names

    # The API enqueued the jobs (an idempotent replay would not count) and refused one.
    def api_moved(name: str, **labels: str) -> float:
        return api_after.value(name, **labels) - api_before.value(name, **labels)

    echo = {"job_type": "demo.echo"}
    assert api_moved("jobrail_jobs_enqueued_total", **echo) == 3 + 1 + 1 + 2 + 1
    assert api_moved("jobrail_jobs_enqueued_total", job_type="test.vendor_call") == 2
    assert api_moved("jobrail_jobs_enqueued_total", job_type="test.exclusive") == 2
    assert api_moved("jobrail_api_rate_limited_total") == 1

    # The workers ran them: outcomes, attempts and waits, added up over both processes.
    assert moved(workers_after, "jobrail_jobs_succeeded_total", **echo) == 3 + 1 + 2 + 1
    assert moved(workers_after, "jobrail_jobs_failed_total", **echo) == 1
    assert moved(workers_after, "jobrail_jobs_retried_total", **echo) == 1
    assert moved(workers_after, "jobrail_jobs_succeeded_total", job_type="test.vendor_call") == 2
    assert moved(workers_after, "jobrail_jobs_succeeded_total", job_type="test.exclusive") == 2
    assert moved(workers_after, "jobrail_job_runtime_seconds_count", **echo) == 7 + 1 + 1
    assert moved(workers_after, "jobrail_job_time_to_start_seconds_count", **echo) == 8
    complete = "jobrail_job_time_to_complete_seconds_count"
    assert moved(workers_after, complete, outcome="succeeded", **echo) == 7
    assert moved(workers_after, complete, outcome="failed", **echo) == 1
    exclusive_runs = {"job_type": "test.exclusive", "outcome": "succeeded"}
    # Each exclusive job held its lock for half a second.
    assert moved(workers_after, "jobrail_job_runtime_seconds_sum", **exclusive_runs) >= 2 * 0.5

    # The limits: both limited pairs got in, the second of each after a deferral.
    assert moved(workers_after, "jobrail_limit_admitted_total") == 4
    assert moved(workers_after, "jobrail_limit_deferred_total") >= 2
    assert moved(workers_after, "jobrail_lock_contention_total") >= 1
    assert moved(workers_after, "jobrail_lock_lost_total") == 0

    # The backlog, as each process sees it: two consumers, one dead letter.
    for scrape in (api_after, workers_after):
        assert scrape.has("jobrail_queue_depth", queue="jobs.default")
        assert scrape.has("jobrail_outbox_lag_seconds")
    assert api_after.value("jobrail_queue_consumers", queue="jobs.default") == 2
    assert workers_after.value("jobrail_dlq_depth") == 2  # one per process: the same queue
    # The two worker processes, from their beats.
    assert api_after.value("jobrail_workers", state="alive") == 2
    assert api_after.value("jobrail_workers", state="gone") == 0

    # Labels are job types, queues and outcomes: never a job id or a tenant id.
    for scrape in (api_after, workers_after):
        assert scrape.label_names() <= LABEL_NAMES
        assert not scrape.label_values() & {*ids, api.tenant_id}


async def test_a_worker_process_restarted_by_taskiq_serves_its_metrics_on_the_same_port(
    workers: Callable[..., Any],
) -> None:
    base = free_ports(1)
    worker = await workers("worker", JOBRAIL_METRICS__WORKER_PORT=str(base))
    url = f"http://127.0.0.1:{base}/metrics"
    await wait_for(lambda: _workers_answer([url]), timeout=30, what="the worker's metrics")
    [child] = _children(worker.pid)

    os.kill(child, signal.SIGKILL)

    async def answers_from_a_new_process() -> bool:
        if _children(worker.pid) in ([], [child]):
            return False
        return await _workers_answer([url]) is not None

    await wait_for(answers_from_a_new_process, timeout=30, interval=0.2, what="a new worker")


def _children(parent: int) -> list[int]:
    """The worker processes Taskiq forked under `jobrail worker` (its process manager)."""
    children = Path(f"/proc/{parent}/task/{parent}/children")
    return [int(pid) for pid in children.read_text().split()]


def _embedded(tmp_path: Path, **metrics: object) -> Settings:
    settings = Settings(
        mode="embedded",
        environment="test",
        modules=["demo"],
        database={"url": f"sqlite+aiosqlite:///{tmp_path}/jobrail.db"},  # type: ignore[arg-type]
        retry={"base_s": 0.05, "jitter": "none"},  # type: ignore[arg-type]
        metrics=metrics,  # type: ignore[arg-type]
    )
    migrate(settings)
    return settings


@asynccontextmanager
async def _embedded_client(settings: Settings) -> AsyncIterator[ApiClient]:
    app = create_app(settings)
    client = ApiClient(transport=httpx.ASGITransport(app=app), base_url="http://api")
    client.app = app
    async with app.router.lifespan_context(app), client:
        yield client.sign_in_with("demo", "demo-key")


async def test_the_embedded_mode_serves_the_metrics_of_its_in_process_worker(
    tmp_path: Path,
) -> None:
    settings = await asyncio.to_thread(_embedded, tmp_path)
    async with _embedded_client(settings) as api:
        job_id = await api.echo(message="hi", fail_times=1)
        await api.wait_status(job_id, "succeeded")

        scrape = await _scrape_api(api)

        echo = {"job_type": "demo.echo"}
        assert scrape.value("jobrail_jobs_enqueued_total", **echo) == 1
        assert scrape.value("jobrail_jobs_retried_total", **echo) == 1
        assert scrape.value("jobrail_jobs_succeeded_total", **echo) == 1
        assert scrape.value("jobrail_dlq_depth") == 0
        assert scrape.value("jobrail_outbox_lag_seconds") >= 0


async def test_a_batch_counts_as_many_enqueued_jobs_as_it_created_and_ran(
    tmp_path: Path,
) -> None:
    settings = await asyncio.to_thread(_embedded, tmp_path)
    async with _embedded_client(settings) as api:
        replay = {"Idempotency-Key": "demo-batch"}
        started = await api.post("/demo/batch", json={"count": 4}, headers=replay)
        assert started.status_code == 202, started.text
        again = await api.post("/demo/batch", json={"count": 4}, headers=replay)
        assert again.headers["Idempotent-Replayed"] == "true"
        await api.wait_status(started.json()["then_job_id"], "succeeded")

        scrape = await _scrape_api(api)

        # Four members and the `then` callback, each counted once, as each ran once.
        for job_type, created in (("demo.echo", 4), ("demo.batch_sum", 1)):
            assert scrape.value("jobrail_jobs_enqueued_total", job_type=job_type) == created
            assert scrape.value("jobrail_jobs_succeeded_total", job_type=job_type) == created


async def test_metrics_want_the_metrics_token_when_one_is_set(tmp_path: Path) -> None:
    settings = await asyncio.to_thread(_embedded, tmp_path, token="scrape-secret")
    async with _embedded_client(settings) as api:
        # A tenant's API key is not the metrics token.
        assert (await api.get("/metrics")).status_code == 401
        scraper = {"Authorization": "Bearer scrape-secret"}
        response = await api.get("/metrics", headers=scraper)
        assert response.status_code == 200
        assert "jobrail_jobs_enqueued_total" in response.text


async def test_metrics_can_be_turned_off_on_the_api(tmp_path: Path) -> None:
    settings = await asyncio.to_thread(_embedded, tmp_path, api_enabled=False)
    async with _embedded_client(settings) as api:
        assert (await api.get("/metrics")).status_code == 404
