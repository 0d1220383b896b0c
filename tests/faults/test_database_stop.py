"""Stop Postgres during a run: /ready says 503, workers hold what they could not record
(nothing is acknowledged unrecorded), and everything finishes once it is back."""

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.faults.conftest import in_thread, job_counts, wait_all_terminal
from tests.support.fixtures import ApiClient
from tests.support.rabbit import RabbitProbe
from tests.support.recorder import Recorder
from tests.support.services import start_postgres, stop_postgres, wait_for

JOBS, DOWN_FOR = 120, 5.0


@pytest.fixture
def postgres_restored() -> Iterator[None]:
    try:
        yield
    finally:
        start_postgres()


async def test_with_postgres_stopped_nothing_unrecorded_is_acknowledged_and_all_recovers(
    api: ApiClient,
    workers: Any,
    recorder: Recorder,
    engine: AsyncEngine,
    rabbit: RabbitProbe,
    postgres_restored: None,
    report: Any,
) -> None:
    for n in range(2):
        await workers(f"w{n}", JOBRAIL_WORKER__MAX_ASYNC_TASKS="8")
    ids = set(
        await asyncio.gather(
            *(
                api.enqueue("test.effect", {"url": recorder.url, "sleep_ms": 150})
                for _ in range(JOBS)
            )
        )
    )
    await wait_for(
        lambda: _some_done(engine), timeout=20, interval=0.05, what="the first jobs to finish"
    )

    await in_thread(stop_postgres)
    effects_at_stop = len(recorder.effects())
    await asyncio.sleep(DOWN_FOR / 2)
    ready = await api.get("/ready")
    health = await api.get("/health")
    enqueue = await api.post("/demo/echo", json={"message": "m"})
    queue = rabbit.topology.queues["jobs.default"]
    held_in_rabbit, _ = await rabbit.depth(queue)
    await asyncio.sleep(DOWN_FOR / 2)
    effects_while_down = len(recorder.effects()) - effects_at_stop
    back = time.monotonic()  # recovery is timed from the start command
    await in_thread(start_postgres)
    await engine.dispose()  # the test's own connections died with the server

    done_at = await wait_all_terminal(engine, JOBS, timeout=90)

    counts = await job_counts(engine)
    effects = recorder.effects()
    assert ready.status_code == 503
    assert ready.json()["checks"]["database"].startswith("unavailable")
    assert health.status_code == 200
    assert enqueue.status_code == 503
    assert enqueue.json()["error"]["code"] == "database_unavailable"
    assert counts == {"succeeded": JOBS}
    assert set(effects) == ids
    assert max(effects.values()) == 1  # no attempt ran twice: unrecorded work was held
    report(
        scenario="postgres stopped mid-run",
        jobs=JOBS,
        succeeded=counts["succeeded"],
        lost=0,
        duplicated=0,
        redeliveries_absorbed=0,
        recover_s=round(done_at - back, 1),
        notes=f"down {DOWN_FOR}s; effects done while down={effects_while_down} (recorded "
        f"after), messages waiting in RabbitMQ={held_in_rabbit}, /ready 503, enqueue 503",
    )


async def _some_done(engine: AsyncEngine) -> bool:
    return (await job_counts(engine)).get("succeeded", 0) > 10
