"""Batches through the API in embedded mode: POST /demo/batch, its counts on
GET /batches/{id} and on its jobs, the `then` callback's sum, a failing batch, and
cancelling a batch as a whole."""

from typing import Any

from tests.support.fixtures import ApiClient
from tests.support.services import wait_for


async def _finished(api: ApiClient, path: str) -> dict[str, Any]:
    async def done() -> dict[str, Any] | None:
        body: dict[str, Any] = (await api.get(path)).json()
        return body if body.get("finished_at") else None

    found: dict[str, Any] = await wait_for(done, timeout=20, what=f"{path} to finish")
    return found


async def test_a_demo_batch_runs_its_then_callback_once_with_the_sum(api: ApiClient) -> None:
    started = await api.post("/demo/batch", json={"count": 12, "fail_times": 1})
    assert started.status_code == 202, started.text
    body = started.json()
    assert len(body["job_ids"]) == 12
    assert started.headers["Location"].endswith(f"/batches/{body['batch_id']}")

    then = await _finished(api, f"/jobs/{body['then_job_id']}")
    assert then["status"] == "succeeded"
    assert then["result"] == {"sum": sum(range(12)), "members": 12}
    assert then["attempts"] == 1
    assert then["flow"]["id"] == body["batch_id"]
    assert then["flow"]["role"] == "then"

    batch = (await api.get(f"/batches/{body['batch_id']}")).json()
    assert batch["status"] == "succeeded"
    assert batch["counts"] == {
        "total": 12,
        "pending": 0,
        "running": 0,
        "succeeded": 12,
        "failed": 0,
        "cancelled": 0,
    }
    assert batch["callbacks"] == {"then": body["then_job_id"]}
    member = (await api.get(f"/jobs/{body['job_ids'][3]}")).json()
    assert member["flow"]["role"] == "member"
    assert member["flow"]["step"] == 3
    assert member["flow"]["counts"]["succeeded"] == 12
    assert member["attempts"] == 2  # failed once, as asked


async def test_a_batch_with_a_failing_member_cancels_its_then_callback(api: ApiClient) -> None:
    # Each member fails more often than its attempts allow (3): all fail.
    started = (await api.post("/demo/batch", json={"count": 2, "fail_times": 5})).json()

    batch = await _finished(api, f"/batches/{started['batch_id']}")
    assert batch["status"] == "failed"
    assert batch["counts"]["failed"] == 2
    then = (await api.get(f"/jobs/{started['then_job_id']}")).json()
    assert then["status"] == "cancelled"
    assert then["attempts"] == 0
    assert "2 failed" in then["last_error"]


async def test_a_batch_cancelled_as_a_whole_never_runs_its_then(api: ApiClient) -> None:
    started = (await api.post("/demo/batch", json={"count": 20, "sleep_ms": 2000})).json()

    cancelled = await api.post(f"/batches/{started['batch_id']}/cancel")
    assert cancelled.status_code == 200, cancelled.text
    assert cancelled.json()["cancel_requested"] is True

    batch = await _finished(api, f"/batches/{started['batch_id']}")
    assert batch["status"] == "cancelled"
    assert batch["counts"]["cancelled"] == 20
    then = (await api.get(f"/jobs/{started['then_job_id']}")).json()
    assert then["status"] == "cancelled"
    again = await api.post(f"/batches/{started['batch_id']}/cancel")
    assert again.status_code == 409
    assert "already cancelled" in again.json()["error"]["message"]


async def test_batch_requests_are_checked_and_scoped_to_their_tenant(api: ApiClient) -> None:
    assert (await api.post("/demo/batch", json={"count": 0})).status_code == 422
    assert (await api.post("/demo/batch", json={"count": "3"})).status_code == 422
    started = (await api.post("/demo/batch", json={"count": 1})).json()
    other = await api.auth("globex")
    assert (await api.get(f"/batches/{started['batch_id']}", headers=other)).status_code == 404
    assert (await api.get(f"/chains/{started['batch_id']}")).status_code == 404
    missing = await api.get("/batches/00000000-0000-0000-0000-000000000000")
    assert missing.status_code == 404
    assert "not found" in missing.json()["error"]["message"]


async def test_the_same_idempotency_key_returns_the_same_batch(api: ApiClient) -> None:
    headers = {"Idempotency-Key": "month-end-2026-11"}
    first = await api.post("/demo/batch", json={"count": 3}, headers=headers)
    second = await api.post("/demo/batch", json={"count": 3}, headers=headers)
    assert second.status_code == 202
    assert second.headers["Idempotent-Replayed"] == "true"
    assert second.json() == first.json()


async def test_an_idempotency_key_reused_with_another_body_is_a_conflict(
    api: ApiClient,
) -> None:
    headers = {"Idempotency-Key": "month-end-2026-12"}
    first = await api.post("/demo/batch", json={"count": 3}, headers=headers)
    assert first.status_code == 202, first.text

    for body in ({"count": 4}, {"count": 3, "sleep_ms": 10}):
        reused = await api.post("/demo/batch", json=body, headers=headers)
        assert reused.status_code == 409, reused.text
        message = reused.json()["error"]["message"]
        assert "already used for a different request" in message
        assert first.json()["batch_id"] in message
    listed = (await api.get("/jobs", params={"limit": 100})).json()
    assert len(listed["items"]) == 3 + 1  # the first batch's members and its `then`


async def test_an_idempotency_key_is_one_request_whether_it_made_a_job_or_a_batch(
    api: ApiClient,
) -> None:
    job_key = {"Idempotency-Key": "import-7"}
    assert (await api.post("/demo/echo", json={"message": "a"}, headers=job_key)).status_code == 202
    reused = await api.post("/demo/batch", json={"count": 2}, headers=job_key)
    assert reused.status_code == 409, reused.text
    assert "already used for a job" in reused.json()["error"]["message"]

    batch_key = {"Idempotency-Key": "import-8"}
    assert (await api.post("/demo/batch", json={"count": 2}, headers=batch_key)).status_code == 202
    reused = await api.post("/demo/echo", json={"message": "a"}, headers=batch_key)
    assert reused.status_code == 409, reused.text
    assert "already used for a batch" in reused.json()["error"]["message"]
    listed = (await api.get("/jobs", params={"limit": 100})).json()
    assert len(listed["items"]) == 1 + 2 + 1  # the job, the batch's members and its `then`
