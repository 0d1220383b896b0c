"""The fault-injection suite (`make test-faults`): real faults in the real services.

Every scenario ends by checking the end state in the database and at the recording
sandboxes (the recorder, the SMTP server, the vendor): no job lost, no effect done
twice, every job terminal. Each adds a line to the report printed at the end.
"""

import asyncio
import json
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from typing import Any

import pytest
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from jobrail.kernel.ids import JobId
from jobrail.store.tables import jobs
from tests.support.apps import reference_and_test_jobs
from tests.support.fixtures import settings_from
from tests.support.processes import Process, start_worker
from tests.support.rabbit import RabbitProbe
from tests.support.recorder import Recorder
from tests.support.servers import RunningSandbox, SmtpSink, sandbox_vendor, smtp_server
from tests.support.services import reachable, wait_for
from tests.support.wire import job_envelope

APP = "tests.support.apps:reference_and_test_jobs"
TERMINAL = ("succeeded", "failed", "cancelled")
# A fault scenario's own time limit (pytest-timeout), in place of the suite's 300 s: the
# longest drains a 1,000-job backlog through three kills, 120 s on a quiet machine.
SCENARIO_TIMEOUT_S = 900


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/faults/" in item.nodeid:
            item.add_marker(pytest.mark.timeout(SCENARIO_TIMEOUT_S))


@dataclass
class ScenarioReport:
    scenario: str
    jobs: int
    succeeded: int
    lost: int
    duplicated: int
    redeliveries_absorbed: int
    recover_s: float
    notes: str = ""


_REPORTS: list[ScenarioReport] = []


@pytest.fixture
def report() -> Callable[..., ScenarioReport]:
    def add(**values: Any) -> ScenarioReport:
        line = ScenarioReport(**values)
        _REPORTS.append(line)
        return line

    return add


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not _REPORTS:
        return
    terminalreporter.section("fault scenarios")
    for line in _REPORTS:
        terminalreporter.write_line(
            "  ".join(f"{key}={value}" for key, value in asdict(line).items() if value != "")
        )


@pytest.fixture
def smtp() -> Iterator[SmtpSink]:
    with smtp_server() as sink:
        yield sink


@pytest.fixture
def vendor() -> Iterator[RunningSandbox]:
    with sandbox_vendor(rate_per_s=500, page_delay_ms=20) as sandbox:
        yield sandbox


@pytest.fixture
def recorder() -> Iterator[Recorder]:
    with Recorder() as running:
        yield running


@pytest.fixture
def fault_env(stack_env: dict[str, str], smtp: SmtpSink, vendor: RunningSandbox) -> dict[str, str]:
    return {
        **stack_env,
        "JOBRAIL_APP": APP,
        # API limits on (enqueue fails closed without Redis), but loose enough to never bind.
        "JOBRAIL_API_LIMITS__ENQUEUE": '[{"scope": "tenant", "limit": 1000000, "window_s": 60}]',
        "JOBRAIL_NOTIFICATIONS__EMAIL_BACKEND": "smtp",
        "JOBRAIL_NOTIFICATIONS__SMTP_PORT": str(smtp.port),
        "JOBRAIL_SYNC__VENDOR_BASE_URL": vendor.url,
        "JOBRAIL_SYNC__SANDBOX": "false",
        # A killed attempt is taken over when its lease (timeout + grace) ends, and a
        # job must survive several kills: short timeouts, more attempts.
        "JOBRAIL_JOBS__TIMEOUTS_S": json.dumps(
            {
                "test.effect": 2,
                "demo.echo": 5,
                "sync.account": 5,
                "notifications.send_receipt": 5,
                "billing.pay_invoice": 5,
            }
        ),
        "JOBRAIL_RETRY__MAX_ATTEMPTS": "12",
    }


@pytest.fixture
def worker_env(fault_env: dict[str, str]) -> dict[str, str]:
    return fault_env


@pytest.fixture
async def api(
    fault_env: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
    make_api: Callable[..., Any],
    rabbit: RabbitProbe,
) -> Any:
    async with make_api(
        settings_from(fault_env, monkeypatch), reference_and_test_jobs.modules
    ) as client:
        yield client


@pytest.fixture
def spawn_worker(worker_env: dict[str, str]) -> Iterator[Callable[..., Process]]:
    """Start a worker without waiting for it to consume (the kill loop keeps going)."""
    started: list[Process] = []

    def spawn(name: str, **extra: str) -> Process:
        process = start_worker({**worker_env, **extra}, name=name)
        started.append(process)
        return process

    yield spawn
    for process in started:
        process.stop()


async def job_counts(engine: AsyncEngine) -> dict[str, int]:
    async with engine.connect() as conn:
        rows = (
            await conn.execute(select(jobs.c.status, func.count()).group_by(jobs.c.status))
        ).all()
    return {str(status): int(count) for status, count in rows}


async def wait_all_terminal(engine: AsyncEngine, expected: int, timeout: float) -> float:
    """Wait until `expected` jobs exist and all are terminal; return when that happened."""

    async def done() -> bool:
        counts = await job_counts(engine)
        return sum(counts.values()) == expected and sum(counts.get(s, 0) for s in TERMINAL) == (
            expected
        )

    try:
        await wait_for(done, timeout=timeout, interval=0.25, what=f"{expected} terminal jobs")
    except AssertionError:
        async with engine.connect() as conn:
            stuck = (
                await conn.execute(
                    select(
                        jobs.c.id, jobs.c.type, jobs.c.status, jobs.c.attempts, jobs.c.lease_until
                    ).where(jobs.c.status.not_in(TERMINAL))
                )
            ).all()
        raise AssertionError(
            f"not all terminal: {await job_counts(engine)}; unfinished: {stuck[:10]}"
        ) from None
    return time.monotonic()


async def republish_all(rabbit: RabbitProbe, engine: AsyncEngine) -> int:
    """Publish every job's message once more, as RabbitMQ may redeliver it (a blocked
    job's too); return how many."""
    async with engine.connect() as conn:
        rows = (
            await conn.execute(select(jobs.c.id, jobs.c.type, jobs.c.queue, jobs.c.tenant_id))
        ).all()
    for row in rows:
        envelope = job_envelope(
            job_id=JobId(row.id), job_type=row.type, queue=row.queue, tenant_id=row.tenant_id
        )
        await rabbit.publish_raw(rabbit.topology.queues[row.queue], envelope.body)
    return len(rows)


def rabbitmqctl(*args: str) -> None:
    subprocess.run(["rabbitmqctl", *args], check=True, capture_output=True, timeout=120)


def start_rabbitmq_app() -> None:
    """Start RabbitMQ's application (if stopped) and wait until it takes connections."""
    subprocess.run(["rabbitmqctl", "start_app"], check=False, capture_output=True, timeout=120)
    deadline = time.monotonic() + 60
    while not reachable(5672) and time.monotonic() < deadline:
        time.sleep(0.2)
    if not reachable(5672):
        raise RuntimeError("RabbitMQ did not come back")


@pytest.fixture
def rabbitmq_restored() -> Iterator[None]:
    """Whatever the test does to RabbitMQ, it is running again afterwards."""
    try:
        yield
    finally:
        start_rabbitmq_app()


async def in_thread(function: Callable[..., Any], *args: Any) -> Any:
    return await asyncio.to_thread(function, *args)
