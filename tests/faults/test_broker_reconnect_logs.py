"""RabbitMQ drops a working worker's connections: one warning, no error.

The worker reaches RabbitMQ through a proxy, and the test does to the worker's own
connections what a RabbitMQ restart does to every client's: the broker closes them
(``rabbitmqctl close_connection``: Connection.Close 320 CONNECTION_FORCED, as at
shutdown), then the port refuses connections for a few seconds. RabbitMQ itself keeps
running for everyone else, so this can run as often as needed. The jobs in flight
finish, their acknowledgements fail on the dead channels, RabbitMQ redelivers them and
the claims absorb the duplicates. None of that is an error: the worker's log has no
ERROR record and one WARNING about the connection, every job succeeds and its effect
is done once. The second test does the same through a real restart of RabbitMQ
(``rabbitmqctl stop_app``/``start_app``).
"""

import asyncio
import subprocess
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

from tests.faults.conftest import in_thread, job_counts, rabbitmqctl, wait_all_terminal
from tests.support.fixtures import ApiClient
from tests.support.recorder import Recorder
from tests.support.services import wait_for
from tests.support.tcp_proxy import TcpProxy

JOBS, DOWN_S = 120, 4.0
# Where a worker's log talks about its broker connection.
BROKER_LOGGERS = ("aio_pika", "aiormq", "jobrail.broker", "taskiq_aio_pika")


def broker_log(records: list[dict[str, Any]]) -> tuple[list[str], list[str], list[str]]:
    """The ERROR records of a worker's log, its WARNING records about the broker
    connection, and its INFO records saying it reconnected."""
    errors = [
        f"{r.get('logger')}: {r.get('msg')}\n{r.get('exc', '')}"
        for r in records
        if r["level"] in ("error", "critical")
    ]
    warnings = [
        f"{r.get('logger')}: {r.get('msg')}"
        for r in records
        if r["level"] == "warning" and str(r.get("logger", "")).startswith(BROKER_LOGGERS)
    ]
    back = [
        str(r["msg"])
        for r in records
        if r.get("logger") == "jobrail.broker" and str(r["msg"]).startswith("reconnected")
    ]
    return errors, warnings, back


def close_connections_from(ports: set[int]) -> int:
    """Have RabbitMQ close (320 CONNECTION_FORCED) its connections from these client
    ports: only this test's, whatever else is connected."""
    listed = subprocess.run(
        ["rabbitmqctl", "list_connections", "pid", "peer_port", "-q"],
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout
    closed = 0
    for line in listed.splitlines():
        fields = line.split("\t")
        if len(fields) == 2 and fields[1].isdigit() and int(fields[1]) in ports:
            subprocess.run(
                ["rabbitmqctl", "close_connection", fields[0], "restart drill"],
                check=True,
                capture_output=True,
                timeout=60,
            )
            closed += 1
    return closed


async def test_a_broker_closing_the_workers_connections_logs_one_warning_and_no_error(
    api: ApiClient,
    workers: Any,
    recorder: Recorder,
    engine: AsyncEngine,
) -> None:
    async with TcpProxy(5672) as proxy:
        worker = await workers(
            "proxied",
            JOBRAIL_RABBIT__URL=f"amqp://guest:guest@127.0.0.1:{proxy.port}/",
            JOBRAIL_WORKER__MAX_ASYNC_TASKS="8",
            JOBRAIL_RABBIT__PREFETCH="8",
            JOBRAIL_JOBS__TIMEOUTS_S='{"test.effect": 30}',
        )
        ids = set(
            await asyncio.gather(
                *(
                    api.enqueue("test.effect", {"url": recorder.url, "sleep_ms": 300})
                    for _ in range(JOBS)
                )
            )
        )
        await wait_for(lambda: _busy(engine), timeout=60, interval=0.1, what="jobs to be running")
        await proxy.refuse()
        closed = await in_thread(close_connections_from, proxy.upstream_ports())
        await asyncio.sleep(DOWN_S)
        await proxy.accept()
        await wait_all_terminal(engine, JOBS, timeout=120)
        # Its log says it is back (the reconnection may lag the last job).
        await wait_for(
            lambda: _said_back(worker), timeout=30, interval=0.2, what="the worker to reconnect"
        )
        # Read before the proxy goes: the worker would (rightly) warn about that too.
        records = worker.log_records()

    counts = await job_counts(engine)
    errors, warnings, back = broker_log(records)
    print("\n".join(["", f"closed {closed} connections", *errors, *warnings, *back]))
    assert closed == 2  # the worker's publishing and consuming connections
    assert counts == {"succeeded": JOBS}
    assert set(recorder.effects()) == ids
    assert errors == []
    assert len(warnings) == 1, warnings
    assert warnings[0].startswith("jobrail.broker: lost the connection to RabbitMQ")
    assert len(back) == 1, back


async def _busy(engine: AsyncEngine) -> bool:
    counts = await job_counts(engine)
    return counts.get("succeeded", 0) >= 10 and counts.get("running", 0) > 0


async def _said_back(worker: Any) -> bool:
    return bool(broker_log(worker.log_records())[2])


async def test_a_rabbitmq_restart_under_a_working_worker_logs_one_warning_and_no_error(
    api: ApiClient,
    workers: Any,
    recorder: Recorder,
    engine: AsyncEngine,
    rabbitmq_restored: None,
) -> None:
    """The real thing (it stops RabbitMQ for everyone on this machine: run it rarely)."""
    worker = await workers(
        "restarted",
        JOBRAIL_WORKER__MAX_ASYNC_TASKS="8",
        JOBRAIL_RABBIT__PREFETCH="8",
        JOBRAIL_JOBS__TIMEOUTS_S='{"test.effect": 30}',
    )
    ids = set(
        await asyncio.gather(
            *(
                api.enqueue("test.effect", {"url": recorder.url, "sleep_ms": 300})
                for _ in range(JOBS)
            )
        )
    )
    await wait_for(lambda: _busy(engine), timeout=60, interval=0.1, what="jobs to be running")
    await in_thread(rabbitmqctl, "stop_app")
    await asyncio.sleep(DOWN_S)
    await in_thread(rabbitmqctl, "start_app")
    await wait_all_terminal(engine, JOBS, timeout=180)
    await wait_for(
        lambda: _said_back(worker), timeout=60, interval=0.2, what="the worker to reconnect"
    )

    counts = await job_counts(engine)
    errors, warnings, back = broker_log(worker.log_records())
    print("\n".join(["", *errors, *warnings, *back]))
    assert counts == {"succeeded": JOBS}
    assert set(recorder.effects()) == ids
    assert errors == []
    assert len(warnings) == 1, warnings
    assert warnings[0].startswith("jobrail.broker: lost the connection to RabbitMQ")
    assert len(back) == 1, back
