"""SIGKILL the worker running a job just after its cancel was accepted: the job ends
cancelled (the next worker's claim sees the cancel and does not run it), never succeeded."""

from pathlib import Path
from typing import Any

from tests.support.cancelling import TERMINAL, wait_marked
from tests.support.fixtures import ApiClient


async def test_a_worker_killed_while_a_cancel_is_in_flight_loses_nothing(
    api: ApiClient, workers: Any, tmp_path: Path, report: Any
) -> None:
    holder = await workers("holder")
    job_id = await api.enqueue(
        "test.cancellable", {"way": "sleep", "marks": str(tmp_path), "resource": "kill"}
    )
    await wait_marked(tmp_path, job_id, "started")
    await workers("taker")

    answer = await api.post(f"/jobs/{job_id}/cancel")
    holder.kill()

    assert answer.status_code == 200, answer.text
    assert answer.json()["status"] == "running"
    job = await api.wait_status(job_id, *TERMINAL, timeout=60)
    assert job["status"] == "cancelled", job
    assert job["result"] is None
    events = (await api.get("/events", params={"job_type": "test.cancellable"})).json()
    ends = [e["status"] for e in events["items"] if e["job_id"] == job_id]
    assert "succeeded" not in ends, ends
    assert ends.count("cancelled") == 1, ends
    # The lock is free once the job is: a job of the same lock runs.
    second = await api.enqueue(
        "test.cancellable", {"way": "quick", "marks": str(tmp_path), "resource": "kill"}
    )
    assert (await api.wait_status(second, *TERMINAL, timeout=60))["status"] == "succeeded"
    report(
        scenario="SIGKILL with a cancel in flight",
        jobs=2,
        succeeded=1,
        lost=0,
        duplicated=0,
        redeliveries_absorbed=0,
        recover_s=0.0,
        notes="the cancelled job ended cancelled on the other worker",
    )
