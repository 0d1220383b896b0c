"""The cancel of a running job, as the embedded mode's and the stack's tests run it."""

import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.support.cancel_jobs import Way, marked
from tests.support.fixtures import ApiClient
from tests.support.services import wait_for

TERMINAL = ("succeeded", "failed", "cancelled")


@contextmanager
def silent_server() -> Iterator[str]:
    """The URL of a loopback server that takes connections and never answers."""
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen(64)
        yield f"http://127.0.0.1:{listening.getsockname()[1]}/slow"


async def wait_marked(marks: Path, job_id: str, name: str) -> None:
    async def there() -> bool:
        return marked(marks, job_id, name)

    await wait_for(there, timeout=30, what=f"job {job_id} to mark {name}")


async def cancel_running(api: ApiClient, marks: Path, way: Way, url: str = "") -> dict[str, Any]:
    """Start a job that runs `way` until stopped, cancel it once it runs, and check what
    a cancel promises: the job ends cancelled, its cleanup ran, its lock is free (a
    second job of the same lock runs)."""
    payload = {"way": way, "marks": str(marks), "resource": f"res-{way}", "url": url}
    job_id = await api.enqueue("test.cancellable", payload)
    await wait_marked(marks, job_id, "section" if way == "shielded" else "started")

    answer = await api.post(f"/jobs/{job_id}/cancel")

    assert answer.status_code == 200, answer.text
    assert answer.json()["status"] == "running"
    job = await api.wait_status(job_id, *TERMINAL, timeout=20)
    assert job["status"] == "cancelled", job
    assert marked(marks, job_id, "cleanup")
    if way == "shielded":
        assert marked(marks, job_id, "section-done")
        assert not marked(marks, job_id, "after-section")
    events = (await api.get("/events", params={"job_type": "test.cancellable"})).json()
    ended = [e for e in events["items"] if e["job_id"] == job_id and e["status"] == "cancelled"]
    assert len(ended) == 1, events
    second = await api.enqueue("test.cancellable", {**payload, "way": "quick"})
    assert (await api.wait_status(second, *TERMINAL, timeout=30))["status"] == "succeeded"
    return job
